"""LLM decoding: time between tokens and memory, Tempo against a PyTorch and a JAX decoder (TEMPO §7.2).

One random-weight Llama (``--hidden 512 --layers 6 --vocab 8192``: 26M
parameters, grouped-query attention) decoded greedily three ways:

- **tempo**: ``tpo.llm.Llama.generate`` on the NumPy backend, from a one-token
  prompt up to the longest length, K/V stored as the runtime chooses (block
  store for causal, window store for window attention);
- **tempo-jax** (``--systems tempo tempo-jax torch jax``; not in the default
  run, which it would take past 30 minutes): the same program on the JAX
  backend (every fused island is one XLA program, compiled once per shape:
  the window's reads stop changing shape once it is full; a causal read
  ``k[0:t+1]`` changes shape at every token; ``--attentions masked``, causal
  attention over buffers of a fixed number of rows, never does), with the
  number of XLA programs compiled (``xla_compiles``);
- **torch**: an eager PyTorch decoder with a growing K/V cache (``torch.cat``
  per token; window attention keeps the last ``w`` entries), the usual
  reference implementation;
- **jax**: a decoder step jitted end to end (all layers) over a K/V cache
  padded to the longest length of the sweep (donated, updated in place), masking
  what a position must not see (causal or window), as TEMPO's JAX baseline;
- **transformers** (``--systems ... transformers``, causal and masked sweeps):
  ``LlamaForCausalLM`` in float32 with eager attention, holding the same
  weights, decoding with its own ``generate`` (greedy, its own K/V cache) from
  the same one-token prompts; each token's time is stamped by a logits
  processor, and the run prints how many greedy tokens each Tempo system shares
  with it (``same_tokens`` in the JSON).

Tempo on JAX runs the program twice and times the second run (the first
compiles its XLA programs); with masked attention its tokens reach the host a
launch at a time, so its mean time between tokens over ``--last`` tokens is
the figure to read, not the median.

The time between tokens at a length ``n`` is the mean over the last
``--last`` tokens of a sequence decoded up to ``n``. Tempo decodes every
sequence from its first token (one run per batch and attention, timing each
token as the runtime produces it). The baselines' cost per token does not
depend on how the cache was filled, so they are prefilled with random keys and
values up to ``n - last`` and then decode ``last`` tokens. Every system runs on
one thread (BLAS, PyTorch, XLA: ``PJRT_NPROC=1``), in its own subprocess. Memory is the
process's resident set growth since decoding started (each run is its own
process; the padded JAX cache is counted from its size, XLA's compile memory is
not), read when the length is reached. Each run is its own subprocess.
The machine is shared with other work: wall timings are noisy, so each row
also holds the mean process CPU time between tokens (``cpu_ms``, a table column).

    .venv/bin/python benchmarks/decode.py --quick          # a minute: tiny lengths
    .venv/bin/python benchmarks/decode.py                  # the default sweep (sized for < 30 minutes)

Three more parts: Tempo with causal attention in static tiles of each size of
``--tiles`` at one length (TEMPO Fig. 18) and the tile size ``attention="tiled"``
measures best there (``tempo.llm.tiling.choose_tile``); the seconds to compile
the decoding program for 2 to 32 layers (the layer is a dim, so the program is
the same size); and the prefill, the process CPU seconds from a prompt of
``--prefill-lengths`` tokens to the first new token, Tempo (the prompt's
positions at once over the layer dim) against one eager PyTorch forward over
the prompt. Prints tables and writes ``docs/results/decode.json`` (and
``.png``), ``decode_tiles.json`` (and ``.png``), ``decode_compile.json`` and
``decode_prefill.json``.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@dataclass(frozen=True)
class Size:
    """The benchmarked model's sizes."""

    vocab: int = 8192
    hidden: int = 512
    intermediate: int = 1408
    layers: int = 6
    heads: int = 8
    kv_heads: int = 4

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate
        return 2 * self.vocab * self.hidden + self.layers * (layer + 2 * self.hidden) + self.hidden


def model_config(size: Size, max_positions: int):
    from tempo.llm.config import LlamaConfig

    return LlamaConfig(vocab_size=size.vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
                       num_layers=size.layers, num_heads=size.heads, num_kv_heads=size.kv_heads,
                       head_dim=size.head_dim, max_positions=max_positions)


def weights(size: Size, max_positions: int):
    """The random weights every system runs (``tempo.llm.weights.Weights``: matrices as (in, out),
    stacked over layers)."""
    from tempo.llm.weights import Weights

    return Weights.random(model_config(size, max_positions), seed=0)


def layer_params(wts, convert) -> list[dict]:
    """Each layer's tensors by their names in ``tempo.llm.weights.LAYER_TENSORS`` (matrices as (in, out),
    the joined ones apart), each passed through ``convert`` (to a framework's array)."""
    from tempo.llm.weights import LAYER_TENSORS

    stacks = {key: wts.matrices(key) for key in LAYER_TENSORS}
    return [{key: convert(np.ascontiguousarray(stack[i])) for key, stack in stacks.items()}
            for i in range(len(next(iter(stacks.values()))))]


def rss_mb() -> float:
    """The process's resident set, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def inverse_frequencies(size: Size) -> np.ndarray:
    return (1.0 / 10000.0 ** (np.arange(0, size.head_dim, 2) / size.head_dim)).astype(np.float32)


def _stamp() -> tuple[float, float]:
    """Now: wall seconds and the process's CPU seconds."""
    return time.perf_counter(), time.process_time()


def _tbt(stamps: list[tuple[float, float]]) -> dict:
    """The mean and the median wall time between consecutive ``stamps`` (:func:`_stamp`), and the
    mean process CPU time between them, in ms (on a shared machine, CPU time is the steadier)."""
    wall, cpu = (np.diff([s[k] for s in stamps]) * 1e3 for k in (0, 1))
    return {"tbt_ms": float(np.mean(wall)), "tbt_median_ms": float(np.median(wall)), "cpu_ms": float(np.mean(cpu))}


# ----- Tempo -----
def run_tempo(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile: int | None,
              backend: str = "numpy", masked: bool = False):
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.sampling import Sampling
    from tempo.runtime.executor import Executor

    config = model_config(size, max(lengths) + 1)
    wts = weights(size, max(lengths) + 1)
    stamps, memory, kv, base, ids = {}, {}, {}, [], {}
    wanted = set(lengths)
    executor = []

    def on_token(tokens, position):
        stamps[position] = _stamp()
        ids[position] = np.asarray(tokens).reshape(-1).tolist()
        if not base:
            base.append(rss_mb())
        if position + 1 in wanted:
            memory[position + 1] = rss_mb() - base[0]
            kv[position + 1] = sum(s.nbytes() for s in executor[0].stores.values()
                                   if type(s).__name__ in ("BlockStore", "WindowStore")) / 2 ** 20

    with tpo.Context() as ctx:
        dp = program_mod.build(config, wts, np.ones((batch, 1), np.int64), Attention(window, tile, masked),
                               Sampling(), on_token, capacity=max(lengths))
        started = time.perf_counter()
        program = ctx.compile(fetch=[dp.tokens], backend=backend,
                              passes=program_mod.compile_passes(dp, backend, max(lengths)))
        compile_s = time.perf_counter() - started
    compiles = xla_compiles() if backend == "jax" else None
    bounds = {k.name: v for k, v in dp.bounds(size.layers, max(lengths)).items()}
    if backend == "jax":  # a first run compiles the XLA programs; the second, timed, reuses them
        executor.append(Executor(program.sdg, program.ast, program.backend, bounds, keep={n for n, _ in program.fetch}))
        executor[0].run()
        executor.pop()
        for held in (stamps, memory, kv, base, ids):
            held.clear()
    executor.append(Executor(program.sdg, program.ast, program.backend, bounds, keep={n for n, _ in program.fetch}))
    start = time.perf_counter()
    executor[0].run()
    total = time.perf_counter() - start
    rows = {}
    for n in lengths:
        times = [stamps[p] for p in range(n - last - 1, n) if p in stamps]
        rows[n] = {**_tbt(times), "mem_mb": memory.get(n), "kv_mb": kv.get(n)}
    extra = {} if compiles is None else {"xla_compiles": compiles[0]}
    return rows, {"seconds": total, "compile_s": compile_s, "ids": [list(r) for r in zip(*(ids[p] for p in sorted(ids)))],
                  "launches_per_token": executor[0].ledger.launches / max(lengths), **extra}


def xla_compiles() -> list[int]:
    """A one-item list counting the XLA programs JAX compiles from now on (its compile log)."""
    import logging

    import jax

    count = [0]

    class Counter(logging.Handler):
        def emit(self, record):
            count[0] += record.getMessage().startswith("Compiling ")

    jax.config.update("jax_log_compiles", True)
    logger = logging.getLogger("jax")
    logger.addHandler(Counter())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return count


# ----- PyTorch eager, growing cache -----
def run_torch(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile=None):
    import torch

    torch.set_num_threads(1)
    wts = weights(size, max(lengths) + 1)
    layers = layer_params(wts, torch.from_numpy)
    embed, head, final = (torch.from_numpy(a) for a in (wts.embed, wts.head, wts.final_norm))
    inv = torch.from_numpy(inverse_frequencies(size))
    hd, h, kvh = size.head_dim, size.heads, size.kv_heads

    def rope(x, pos):
        ang = pos * inv
        cos, sin = torch.cat([ang, ang]).cos(), torch.cat([ang, ang]).sin()
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    @torch.no_grad()
    def step(tok, pos, cache):
        x = embed[tok]                                                   # (B, D)
        for i, p in enumerate(layers):
            xn = norm(x, p["input_norm"])
            q = rope((xn @ p["wq"]).view(batch, kvh, h // kvh, hd), pos)
            k = rope((xn @ p["wk"]).view(batch, kvh, 1, hd), pos)
            v = (xn @ p["wv"]).view(batch, kvh, 1, hd)
            ck, cv = cache[i]
            ck, cv = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
            if window is not None and ck.shape[2] > window:
                ck, cv = ck[:, :, -window:], cv[:, :, -window:]
            cache[i] = (ck, cv)
            att = torch.softmax(q @ ck.transpose(-1, -2) * hd ** -0.5, -1) @ cv
            x = x + att.reshape(batch, -1) @ p["wo"]
            xn = norm(x, p["post_norm"])
            x = x + (torch.nn.functional.silu(xn @ p["w_gate"]) * (xn @ p["w_up"])) @ p["w_down"]
        return (norm(x, final) @ head).argmax(-1)

    rows = {}
    for n in lengths:
        base = rss_mb()
        held = n - last if window is None else min(n - last, window)
        cache = [(torch.randn(batch, kvh, held, hd), torch.randn(batch, kvh, held, hd)) for _ in range(size.layers)]
        tok = torch.ones(batch, dtype=torch.long)
        stamps = []
        for pos in range(n - last - 1, n):
            tok = step(tok, float(pos), cache)
            stamps.append(_stamp())
        rows[n] = {**_tbt(stamps), "mem_mb": rss_mb() - base,
                   "kv_mb": sum(k.nbytes + v.nbytes for k, v in cache) / 2 ** 20}
        del cache
    return rows, {}


# ----- transformers' eager generate -----
def transformers_model(size: Size, max_positions: int):
    """``LlamaForCausalLM`` in float32 with eager attention, holding the same weights as every system."""
    import torch
    import transformers

    from tempo.llm.weights import LAYER_TENSORS, TRANSPOSED

    config = transformers.LlamaConfig(vocab_size=size.vocab, hidden_size=size.hidden,
                                      intermediate_size=size.intermediate, num_hidden_layers=size.layers,
                                      num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
                                      head_dim=size.head_dim, max_position_embeddings=max_positions,
                                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                                      attn_implementation="eager")
    wts = weights(size, max_positions)
    state = {"model.embed_tokens.weight": wts.embed, "lm_head.weight": wts.head.T, "model.norm.weight": wts.final_norm}
    for key, (name, _) in LAYER_TENSORS.items():
        stack = wts.matrices(key)
        for i in range(size.layers):
            state[f"model.layers.{i}.{name}"] = stack[i].T if key in TRANSPOSED else stack[i]
    model = transformers.LlamaForCausalLM(config).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=True)
    return model.to(torch.float32)


def run_transformers(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile=None,
                     masked: bool = False):
    """``model.generate`` (greedy, no end of sequence) from the one-token prompts Tempo decodes, its
    K/V cache transformers' own (``DynamicCache``); a token's time is stamped by a logits processor,
    called once per step. Its attention is causal, ``masked`` or not (the same function)."""
    import torch
    import transformers

    if window is not None:
        raise ValueError("the transformers system decodes with causal attention only")
    torch.set_num_threads(1)
    model = transformers_model(size, max(lengths) + 1)
    stamps = {}

    class Stamp(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            stamps[input_ids.shape[1] - 1] = _stamp()
            return scores

    prompt = torch.ones((batch, 1), dtype=torch.long)
    with torch.no_grad():
        ids = model.generate(prompt, max_new_tokens=max(lengths), min_new_tokens=max(lengths), do_sample=False,
                             logits_processor=transformers.LogitsProcessorList([Stamp()]), eos_token_id=None,
                             pad_token_id=0)
    rows = {n: _tbt([stamps[p] for p in range(n - last - 1, n)]) for n in lengths}
    return rows, {"ids": ids[:, 1:].tolist()}


# ----- JAX, jitted step over a cache padded to the longest length -----
def run_jax(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile=None):
    import jax
    import jax.numpy as jnp

    hd, h, kvh, L, full = size.head_dim, size.heads, size.kv_heads, size.layers, max(lengths)
    wts = weights(size, full + 1)
    params = layer_params(wts, jnp.asarray)
    embed, head, final = jnp.asarray(wts.embed), jnp.asarray(wts.head), jnp.asarray(wts.final_norm)
    inv = jnp.asarray(inverse_frequencies(size))

    def norm(x, weight):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * weight

    def rope(x, pos):
        ang = pos.astype(jnp.float32) * inv
        cos, sin = jnp.cos(jnp.concatenate([ang, ang])), jnp.sin(jnp.concatenate([ang, ang]))
        return x * cos + jnp.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    def step(tok, pos, ks, vs):
        j = jnp.arange(full)
        visible = j <= pos
        if window is not None:
            visible = visible & (j > pos - window)
        x, new_ks, new_vs = embed[tok], [], []
        for p, k_cache, v_cache in zip(params, ks, vs):       # unrolled: each cache updated in place
            xn = norm(x, p["input_norm"])
            q = rope((xn @ p["wq"]).reshape(batch, kvh, h // kvh, hd), pos)
            k = rope((xn @ p["wk"]).reshape(batch, kvh, hd), pos)
            v = (xn @ p["wv"]).reshape(batch, kvh, hd)
            k_cache = jax.lax.dynamic_update_slice(k_cache, k[:, :, None], (0, 0, pos, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, v[:, :, None], (0, 0, pos, 0))
            s = jnp.einsum("bkgd,bksd->bkgs", q, k_cache) * hd ** -0.5
            s = jnp.where(visible, s, -jnp.inf)
            att = jnp.einsum("bkgs,bksd->bkgd", jax.nn.softmax(s, -1), v_cache)
            x = x + att.reshape(batch, -1) @ p["wo"]
            xn = norm(x, p["post_norm"])
            x = x + (jax.nn.silu(xn @ p["w_gate"]) * (xn @ p["w_up"])) @ p["w_down"]
            new_ks.append(k_cache)
            new_vs.append(v_cache)
        return jnp.argmax(norm(x, final) @ head, -1), tuple(new_ks), tuple(new_vs)

    jitted = jax.jit(step, donate_argnums=(2, 3))
    keys = jax.random.split(jax.random.PRNGKey(0), 2 * L)
    ks = tuple(jax.random.normal(keys[i], (batch, kvh, full, hd), jnp.float32) for i in range(L))
    vs = tuple(jax.random.normal(keys[L + i], (batch, kvh, full, hd), jnp.float32) for i in range(L))
    cache_mb = 2 * L * ks[0].nbytes / 2 ** 20
    tok = jnp.ones(batch, jnp.int32)
    tok, ks, vs = jitted(tok, jnp.int32(0), ks, vs)      # compile
    tok.block_until_ready()
    base = rss_mb() - cache_mb                             # the padded cache counts, the compiler does not
    rows = {}
    for n in lengths:
        stamps = []
        for pos in range(n - last - 1, n):
            tok, ks, vs = jitted(tok, jnp.int32(pos), ks, vs)
            tok.block_until_ready()
            stamps.append(_stamp())
        rows[n] = {**_tbt(stamps), "mem_mb": rss_mb() - base, "kv_mb": cache_mb}
    return rows, {}


# ----- prefill: time to the first new token -----
def prefill_tempo(size: Size, batch: int, length: int) -> dict:
    """Tempo's prefill of a random ``length``-token prompt (all positions at once over the layer
    dim) and the first new token: process CPU seconds of the run, compile apart."""
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.sampling import Sampling

    config, wts = model_config(size, length + 1), weights(size, length + 1)
    prompt = np.random.default_rng(0).integers(0, size.vocab, (batch, length))
    with tpo.Context() as ctx:
        dp = program_mod.build(config, wts, prompt, Attention(), Sampling())
        started = time.perf_counter()
        program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, 1))
        compile_s = time.perf_counter() - started
    runs = []
    for _ in range(3):
        start = time.process_time()
        program.run(dp.bounds(size.layers, 1))
        runs.append(time.process_time() - start)
    return {"cpu_s": min(runs), "runs_cpu_s": runs, "compile_s": compile_s, "launches": program.ledger.launches}


def prefill_torch(size: Size, batch: int, length: int) -> dict:
    """The eager PyTorch reference: one forward over the whole prompt (causal mask), then the
    first token; process CPU seconds."""
    import torch

    torch.set_num_threads(1)
    wts = weights(size, length + 1)
    layers = layer_params(wts, torch.from_numpy)
    embed, head, final = (torch.from_numpy(a) for a in (wts.embed, wts.head, wts.final_norm))
    hd, h, kvh = size.head_dim, size.heads, size.kv_heads
    ang = torch.arange(length, dtype=torch.float32)[:, None] * torch.from_numpy(inverse_frequencies(size))
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()      # (P, hd)

    def rope(x):                                                          # (B, heads, P, hd)
        return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    mask = torch.full((length, length), float("-inf")).triu(1)
    prompt = torch.from_numpy(np.random.default_rng(0).integers(0, size.vocab, (batch, length)))

    @torch.no_grad()
    def forward():
        x = embed[prompt]                                                 # (B, P, D)
        for p in layers:
            xn = norm(x, p["input_norm"])
            q = rope((xn @ p["wq"]).view(batch, length, h, hd).transpose(1, 2))
            k = rope((xn @ p["wk"]).view(batch, length, kvh, hd).transpose(1, 2)).repeat_interleave(h // kvh, 1)
            v = (xn @ p["wv"]).view(batch, length, kvh, hd).transpose(1, 2).repeat_interleave(h // kvh, 1)
            att = torch.softmax(q @ k.transpose(-1, -2) * hd ** -0.5 + mask, -1) @ v
            x = x + att.transpose(1, 2).reshape(batch, length, -1) @ p["wo"]
            xn = norm(x, p["post_norm"])
            x = x + (torch.nn.functional.silu(xn @ p["w_gate"]) * (xn @ p["w_up"])) @ p["w_down"]
        return (norm(x[:, -1], final) @ head).argmax(-1)

    runs = []
    for _ in range(3):
        start = time.process_time()
        forward()
        runs.append(time.process_time() - start)
    return {"cpu_s": min(runs), "runs_cpu_s": runs}


PREFILL = {"tempo": prefill_tempo, "torch": prefill_torch}


def after_prompt_tempo(size: Size, batch: int, prompt: int, window: int | None, new: int) -> dict:
    """Tempo (NumPy) decoding ``new`` tokens after a random ``prompt``-token prompt, causal or with
    a window: the median wall and the mean process CPU ms between the tokens after the first."""
    import tempo as tpo

    model = tpo.llm.Llama(model_config(size, prompt + new + 1), weights(size, prompt + new + 1))
    stamps = []
    ids = np.random.default_rng(0).integers(0, size.vocab, (batch, prompt))
    model.generate(ids, new, attention="causal" if window is None else ("window", window),
                   on_token=lambda column, position: stamps.append(_stamp()), stop_at_eos=False)
    return _tbt(stamps[1:])


# every system computes on one thread: the machine is shared, and BLAS threads fighting over two busy
# cores make timings meaningless. XLA's CPU client runs a program's independent operations on a pool of
# one thread per core unless PJRT_NPROC sets its size, and splits one operation over threads unless
# --xla_cpu_multi_thread_eigen=false.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PJRT_NPROC": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}

SYSTEMS = {"tempo": run_tempo, "tempo-jax": functools.partial(run_tempo, backend="jax"), "torch": run_torch,
           "jax": run_jax, "transformers": run_transformers}
CAUSAL = ("tempo", "torch", "jax")  # the systems of the causal sweep
MASKED = ("tempo", "tempo-jax", "transformers")  # of the masked one (transformers: its causal attention)


def compile_times(size: Size, layer_counts: list[int]) -> list[dict]:
    """Seconds to build and compile the decoding program for each number of layers (and what of
    them CSE and weight packing took: the packing copies the weights, so it grows with them)."""
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.sampling import Sampling

    out = []
    for layers in layer_counts:
        deeper = Size(**{**asdict(size), "layers": layers})
        wts = weights(deeper, 4096)
        with tpo.Context() as ctx:
            start = time.perf_counter()
            dp = program_mod.build(model_config(deeper, 4096), wts, np.ones((4, 1), np.int64), Attention(), Sampling())
            program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, 1))
        seconds = time.perf_counter() - start
        out.append({"layers": layers, "compile_s": seconds, "nodes": len(program.sdg.nodes),
                    "cse_s": program.timings.get("cse", 0.0), "pack_s": program.timings.get("pack_weights", 0.0)})
        print(f"{layers:3d} layers: {seconds:6.2f} s to compile, {len(program.sdg.nodes)} nodes, "
              f"cse {out[-1]['cse_s']:.2f} s, weight packing {out[-1]['pack_s']:.2f} s", flush=True)
    return out


def child(spec: dict) -> dict:
    size = Size(**spec["size"])
    if spec.get("prefill"):
        return PREFILL[spec["system"]](size, spec["batch"], spec["prefill"])
    if spec.get("after_prompt"):
        return after_prompt_tempo(size, spec["batch"], spec["after_prompt"], spec["window"], spec["new"])
    if spec.get("choose_tile"):
        from tempo.llm.tiling import choose_tile

        choice = choose_tile(spec["batch"], size.kv_heads, size.heads // size.kv_heads, size.head_dim,
                             spec["choose_tile"])
        return {"tile": choice.tile, "seconds": {str(z): s for z, s in choice.seconds.items()}, "text": str(choice)}
    masked = {"masked": True} if spec.get("masked") else {}
    rows, extra = SYSTEMS[spec["system"]](size, spec["batch"], spec["window"], spec["lengths"], spec["last"],
                                          spec.get("tile"), **masked)
    return {"rows": {str(k): v for k, v in rows.items()}, **extra}


def run_child(spec: dict, timeout: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **ONE_THREAD})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def same_tokens(results: list[dict]) -> list[dict]:
    """For each run beside a transformers run of the same attention and batch: how many of the
    greedy tokens both decoded are the same, position by position."""
    out = []
    for ref in (r for r in results if r["system"] == "transformers" and "ids" in r):
        for r in results:
            if r["system"] == "transformers" or "ids" not in r or (r["attention"], r["batch"]) != (
                    ref["attention"], ref["batch"]):
                continue
            mine, theirs = np.array(r["ids"]), np.array(ref["ids"])
            n = min(mine.shape[1], theirs.shape[1])
            out.append({"attention": r["attention"], "batch": r["batch"], "system": r["system"],
                        "same": int((mine[:, :n] == theirs[:, :n]).sum()), "tokens": int(mine[:, :n].size)})
    return out


def table(results: list[dict]) -> str:
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]
    lines = ["| attention | batch | length | " + " | ".join(f"{s} TBT ms" for s in systems) + " | "
             + " | ".join(f"{s} CPU ms" for s in systems) + " | " + " | ".join(f"{s} K/V MB" for s in systems) + " |",
             "|---|---|---|" + "---|" * (3 * len(systems))]
    groups = {}
    for r in results:
        groups.setdefault((r["attention"], r["batch"]), {})[r["system"]] = r
    for (attention, batch), by_system in groups.items():
        lengths = sorted({int(n) for r in by_system.values() for n in r.get("rows", {})})
        for n in lengths:
            def cell(system, key):
                row = by_system.get(system, {}).get("rows", {}).get(str(n))
                return "-" if row is None or row.get(key) is None else f"{row[key]:.1f}"
            lines.append(f"| {attention} | {batch} | {n} | " + " | ".join(cell(s, "tbt_ms") for s in systems)
                         + " | " + " | ".join(cell(s, "cpu_ms") for s in systems)
                         + " | " + " | ".join(cell(s, "kv_mb") for s in systems) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["attention"], r["batch"]) for r in results})
    fig, axes = plt.subplots(2, len(groups), figsize=(4 * len(groups), 6), squeeze=False)
    for col, (attention, batch) in enumerate(groups):
        for r in results:
            if (r["attention"], r["batch"]) != (attention, batch) or "rows" not in r:
                continue
            ns = sorted(int(n) for n in r["rows"])
            for row, key in enumerate(("tbt_ms", "kv_mb")):
                ys = [r["rows"][str(n)].get(key) for n in ns]
                axes[row][col].plot(ns, [np.nan if y is None else y for y in ys], marker="o", label=r["system"])
        axes[0][col].set_title(f"{attention}, batch {batch}")
        axes[0][col].set_ylabel("time between tokens (ms)")
        axes[1][col].set_ylabel("K/V memory held (MB)")
        for row in range(2):
            axes[row][col].set_xscale("log", base=2)
            axes[row][col].set_xlabel("sequence length")
            axes[row][col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_tiles(tiles: list[dict], chosen: dict, length: int, path: str) -> None:
    """TEMPO Fig. 18's view: time between tokens at ``length`` against the tile size, per batch
    (the untiled program dashed), beside the micro-run ``attention="tiled"`` chooses from."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for batch in sorted({r["batch"] for r in tiles}):
        rows = [(r["tile"], r.get("rows", {}).get(str(length), {}).get("tbt_ms")) for r in tiles if r["batch"] == batch]
        sized = [(z, ms) for z, ms in rows if z is not None and ms is not None]
        line = left.plot([z for z, _ in sized], [ms for _, ms in sized], marker="o", label=f"batch {batch}")
        untiled = [ms for z, ms in rows if z is None and ms is not None]
        if untiled:
            left.axhline(untiled[0], linestyle="--", color=line[0].get_color(), label=f"untiled, batch {batch}")
        seconds = chosen.get(str(batch), {}).get("seconds", {})
        if seconds:
            sizes = sorted(int(z) for z in seconds)
            right.plot(sizes, [seconds[str(z)] * 1e3 for z in sizes], marker="o", label=f"batch {batch}")
            right.axvline(chosen[str(batch)]["tile"], linestyle=":", color=line[0].get_color())
    left.set(xscale="log", xlabel="tile size Z", ylabel="time between tokens (ms)",
             title=f"decoding to {length} tokens, causal, tiled")
    right.set(xscale="log", xlabel="tile size Z", ylabel="one step's tiled attention (ms)",
              title="what attention='tiled' measures (dotted: its choice)")
    left.set_xscale("log", base=2)
    right.set_xscale("log", base=2)
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny lengths and batch, to check the script")
    parser.add_argument("--systems", nargs="+", default=list(CAUSAL), choices=list(SYSTEMS))
    parser.add_argument("--batches", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--lengths", nargs="+", type=int, default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--causal-max", type=int, default=2048,
                        help="the longest length for causal attention (default: the longest of --lengths)")
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--attentions", nargs="+", default=["causal", "window"], choices=["causal", "window", "masked"],
                        help="masked: Tempo's causal attention over carried fixed-size buffers (tempo, tempo-jax)")
    parser.add_argument("--last", type=int, default=16, help="tokens timed at each length")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per run")
    parser.add_argument("--tiles", nargs="+", type=int, default=[64, 256, 1024],
                        help="tile sizes of the static-tiling sweep (TEMPO Fig. 18)")
    parser.add_argument("--tile-length", type=int, default=1024, help="the length the tile sweep decodes to")
    parser.add_argument("--tile-batches", nargs="+", type=int, default=[4])
    parser.add_argument("--layer-counts", nargs="+", type=int, default=[2, 4, 8, 16, 32])
    parser.add_argument("--prefill-lengths", nargs="+", type=int, default=[128, 512, 2048])
    parser.add_argument("--prefill-batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--window-prompts", nargs="+", type=int, default=[256, 1024, 2048],
                        help="window-prompts part: prompt lengths decoded after (causal and window)")
    parser.add_argument("--window-prompt-batch", type=int, default=4)
    parser.add_argument("--parts", nargs="+", default=["sweep", "tiles", "compile", "prefill"],
                        choices=["sweep", "tiles", "compile", "prefill", "window-prompts"],
                        help="sweep: lengths x systems; tiles: Tempo's tile sizes and the one it measures best; "
                             "compile: compile time per depth; prefill: time to the first token after a prompt; "
                             "window-prompts: Tempo's time between tokens after prompts of each length")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "decode.json"),
                        help="the sweep's JSON (and PNG); the other parts write NAME_tiles.json, NAME_compile.json, "
                             "NAME_prefill.json")
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(ns.child))))
        return
    size = Size()
    if ns.quick:
        ns.batches, ns.lengths, ns.window, ns.last = [2], [32, 64], 16, 8
        ns.tiles, ns.tile_length, ns.tile_batches, ns.layer_counts = [16, 64], 64, [2], [2, 4]
        ns.prefill_lengths, ns.prefill_batches = [32], [2]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    meta = {"size": asdict(size), "parameters": size.parameters(), "commit": commit.strip(),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared"}
    stem = os.path.splitext(ns.out)[0]
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    if "tiles" in ns.parts:
        tiles = []
        for batch in ns.tile_batches:
            for tile in [None, *ns.tiles]:
                spec = {"system": "tempo", "batch": batch, "lengths": [ns.tile_length], "last": ns.last,
                        "window": None, "tile": tile, "size": asdict(size)}
                out = run_child(spec, ns.timeout)
                out.update(batch=batch, tile=tile)
                row = out.get("rows", {}).get(str(ns.tile_length), {})
                print(f"tile {tile or 'none':>5} batch {batch:2d}: TBT {row.get('tbt_ms', float('nan')):7.1f} ms "
                      f"at {ns.tile_length}, compile {out.get('compile_s', float('nan')):6.1f} s"
                      f"{'  ' + out['error'] if 'error' in out else ''}", flush=True)
                tiles.append(out)
        chosen = {}
        for batch in ns.tile_batches:
            choice = run_child({"system": "tempo", "batch": batch, "choose_tile": ns.tile_length,
                                "size": asdict(size)}, ns.timeout)
            print(f"batch {batch:2d}: attention {choice.get('text', choice.get('error'))}", flush=True)
            chosen[str(batch)] = choice
        _write(stem + "_tiles.json", {**meta, "length": ns.tile_length, "last": ns.last, "results": tiles,
                                      "chosen": chosen})
        plot_tiles(tiles, chosen, ns.tile_length, stem + "_tiles.png")
    if "prefill" in ns.parts:
        prefill = []
        for batch in ns.prefill_batches:
            for length in ns.prefill_lengths:
                for system in PREFILL:
                    out = run_child({"system": system, "batch": batch, "prefill": length, "size": asdict(size)},
                                    ns.timeout)
                    out.update(system=system, batch=batch, length=length)
                    print(f"prefill {system:5s} batch {batch:2d} prompt {length:5d}: "
                          f"{out.get('cpu_s', float('nan')):7.3f} CPU s{'  ' + out['error'] if 'error' in out else ''}",
                          flush=True)
                    prefill.append(out)
        _write(stem + "_prefill.json", {**meta, "results": prefill})
    if "window-prompts" in ns.parts:
        rows = []
        for prompt in ns.window_prompts:
            for window in (ns.window, None):
                out = run_child({"after_prompt": prompt, "batch": ns.window_prompt_batch, "window": window,
                                 "new": ns.last + 1, "size": asdict(size)}, ns.timeout)
                out.update(prompt=prompt, attention="causal" if window is None else f"window {window}")
                print(f"after a prompt of {prompt:5d}, {out['attention']:10s}: {out.get('tbt_median_ms', 0):7.1f} ms, "
                      f"{out.get('cpu_ms', 0):6.1f} CPU ms{'  ' + out['error'] if 'error' in out else ''}", flush=True)
                rows.append(out)
        _write(stem + "_window_prompts.json", {**meta, "batch": ns.window_prompt_batch, "tokens": ns.last,
                                                "results": rows})
    if "compile" in ns.parts:
        _write(stem + "_compile.json", {**meta, "results": compile_times(size, ns.layer_counts)})
    if "sweep" not in ns.parts:
        return
    results = []
    started = time.perf_counter()
    for attention in ns.attentions:
        lengths = ns.lengths
        if attention != "window" and ns.causal_max:
            lengths = [n for n in lengths if n <= ns.causal_max]
        for batch in ns.batches:
            for system in ns.systems:
                if attention == "masked" and system not in MASKED:
                    continue
                spec = {"system": system, "batch": batch, "lengths": lengths, "last": ns.last,
                        "window": ns.window if attention == "window" else None, "size": asdict(size),
                        "masked": attention == "masked"}
                t0 = time.perf_counter()
                out = run_child(spec, ns.timeout)
                if "transformers" not in ns.systems:
                    out.pop("ids", None)  # kept to compare with transformers' tokens only
                out.update(system=system, batch=batch, attention=attention if attention != "window"
                           else f"window {ns.window}", wall_s=time.perf_counter() - t0)
                print(f"{system:5s} {attention:6s} batch {batch:2d}: {time.perf_counter() - t0:7.1f} s"
                      f"{'  ' + out['error'] if 'error' in out else ''}", flush=True)
                results.append(out)
    print(table(results))
    agreement = same_tokens(results)
    for line in agreement:
        print(f"{line['attention']} batch {line['batch']}: {line['system']} and transformers pick the same "
              f"{line['same']} of {line['tokens']} greedy tokens")
    _write(ns.out, {**meta, "last": ns.last, "window": ns.window, "seconds": time.perf_counter() - started,
                    "results": results, "same_tokens": agreement})
    plot(results, stem + ".png")


def _write(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
