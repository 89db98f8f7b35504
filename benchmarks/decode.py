"""LLM decoding: time between tokens and memory, Tempo against a PyTorch and a JAX decoder (TEMPO §7.2).

One random-weight Llama (``--hidden 512 --layers 6 --vocab 8192``: 28M
parameters, grouped-query attention) decoded greedily three ways:

- **tempo**: ``tpo.llm.Llama.generate`` on the NumPy backend, from a one-token
  prompt up to the longest length, K/V stored as the runtime chooses (block
  store for causal, window store for window attention);
- **torch**: an eager PyTorch decoder with a growing K/V cache (``torch.cat``
  per token; window attention keeps the last ``w`` entries), the usual
  reference implementation;
- **jax**: a decoder step jitted end to end (all layers, ``lax.scan`` over
  them) over a K/V cache padded to the longest length of the sweep, masking
  what a position must not see (causal or window), as TEMPO's JAX baseline.

The time between tokens at a length ``n`` is the mean over the last
``--last`` tokens of a sequence decoded up to ``n``. Tempo decodes every
sequence from its first token (one run per batch and attention, timing each
token as the runtime produces it). The baselines' cost per token does not
depend on how the cache was filled, so they are prefilled with random keys and
values up to ``n - last`` and then decode ``last`` tokens. Memory is the
process's resident set growth since decoding started (each run is its own
process; the padded JAX cache is counted from its size, XLA's compile memory is
not), read when the length is reached. Each run is its own subprocess.
The machine is shared with other work: timings are noisy.

    .venv/bin/python benchmarks/decode.py --quick          # a minute: tiny lengths
    .venv/bin/python benchmarks/decode.py                  # the default sweep (sized for < 30 minutes)

Prints a table and writes ``docs/results/decode.json`` and ``docs/results/decode.png``.
"""
from __future__ import annotations

import argparse
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


def hf_tensors(size: Size, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under the Hugging Face Llama names."""
    rng = np.random.default_rng(seed)
    d, kv, inter = size.hidden, size.kv_heads * size.head_dim, size.intermediate

    def w(*shape):
        return (rng.standard_normal(shape) * (1.0 / np.sqrt(shape[-1]))).astype(np.float32)

    out = {"model.embed_tokens.weight": w(size.vocab, d), "lm_head.weight": w(size.vocab, d),
           "model.norm.weight": np.ones(d, np.float32)}
    for i in range(size.layers):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": np.ones(d, np.float32),
                    p + "post_attention_layernorm.weight": np.ones(d, np.float32),
                    p + "self_attn.q_proj.weight": w(d, d), p + "self_attn.k_proj.weight": w(kv, d),
                    p + "self_attn.v_proj.weight": w(kv, d), p + "self_attn.o_proj.weight": w(d, d),
                    p + "mlp.gate_proj.weight": w(inter, d), p + "mlp.up_proj.weight": w(inter, d),
                    p + "mlp.down_proj.weight": w(d, inter)})
    return out


def rss_mb() -> float:
    """The process's resident set, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def inverse_frequencies(size: Size) -> np.ndarray:
    return (1.0 / 10000.0 ** (np.arange(0, size.head_dim, 2) / size.head_dim)).astype(np.float32)


# ----- Tempo -----
def run_tempo(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile: int | None):
    import tempo as tpo
    from tempo.llm.config import LlamaConfig
    from tempo.llm.weights import Weights

    config = LlamaConfig(vocab_size=size.vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
                         num_layers=size.layers, num_heads=size.heads, num_kv_heads=size.kv_heads,
                         head_dim=size.head_dim, max_positions=max(lengths) + 1)
    model = tpo.llm.Llama(config, Weights.from_tensors(hf_tensors(size), config))
    stamps, memory, base = {}, {}, []
    wanted = set(lengths)

    def on_token(tokens, position):
        stamps[position] = time.perf_counter()
        if not base:
            base.append(rss_mb())
        if position + 1 in wanted:
            memory[position + 1] = rss_mb() - base[0]

    attention = "causal" if window is None else ("window", window)
    if tile is not None:
        attention = ("tiled", tile)
    start = time.perf_counter()
    model.generate(np.ones((batch, 1), np.int64), max_new_tokens=max(lengths) - 1, attention=attention,
                   stop_at_eos=False, on_token=on_token)
    total = time.perf_counter() - start
    rows = {}
    for n in lengths:
        times = [stamps[p] for p in range(n - last - 1, n) if p in stamps]
        rows[n] = {"tbt_ms": float(np.mean(np.diff(times)) * 1e3), "mem_mb": memory.get(n)}
    return rows, {"seconds": total}


# ----- PyTorch eager, growing cache -----
def run_torch(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile=None):
    import torch

    torch.manual_seed(0)
    w = {k: torch.from_numpy(v) for k, v in hf_tensors(size).items()}
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
        x = w["model.embed_tokens.weight"][tok]                        # (B, D)
        for i in range(size.layers):
            p = f"model.layers.{i}."
            xn = norm(x, w[p + "input_layernorm.weight"])
            q = rope((xn @ w[p + "self_attn.q_proj.weight"].T).view(batch, kvh, h // kvh, hd), pos)
            k = rope((xn @ w[p + "self_attn.k_proj.weight"].T).view(batch, kvh, 1, hd), pos)
            v = (xn @ w[p + "self_attn.v_proj.weight"].T).view(batch, kvh, 1, hd)
            ck, cv = cache[i]
            ck, cv = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
            if window is not None and ck.shape[2] > window:
                ck, cv = ck[:, :, -window:], cv[:, :, -window:]
            cache[i] = (ck, cv)
            att = torch.softmax(q @ ck.transpose(-1, -2) * hd ** -0.5, -1) @ cv
            x = x + att.reshape(batch, -1) @ w[p + "self_attn.o_proj.weight"].T
            xn = norm(x, w[p + "post_attention_layernorm.weight"])
            gate = torch.nn.functional.silu(xn @ w[p + "mlp.gate_proj.weight"].T)
            x = x + (gate * (xn @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        logits = norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
        return logits.argmax(-1)

    rows = {}
    for n in lengths:
        base = rss_mb()
        held = n - last if window is None else min(n - last, window)
        cache = [(torch.randn(batch, kvh, held, hd), torch.randn(batch, kvh, held, hd)) for _ in range(size.layers)]
        tok = torch.ones(batch, dtype=torch.long)
        stamps = []
        for pos in range(n - last - 1, n):
            tok = step(tok, float(pos), cache)
            stamps.append(time.perf_counter())
        rows[n] = {"tbt_ms": float(np.mean(np.diff(stamps)) * 1e3), "mem_mb": rss_mb() - base}
        del cache
    return rows, {}


# ----- JAX, jitted step over a cache padded to the longest length -----
def run_jax(size: Size, batch: int, window: int | None, lengths: list[int], last: int, tile=None):
    import jax
    import jax.numpy as jnp

    tensors = hf_tensors(size)
    hd, h, kvh, L, full = size.head_dim, size.heads, size.kv_heads, size.layers, max(lengths)

    def stack(name):
        return jnp.stack([jnp.asarray(tensors[f"model.layers.{i}.{name}"].T) for i in range(L)])

    params = {k: stack(n) for k, n in [("wq", "self_attn.q_proj.weight"), ("wk", "self_attn.k_proj.weight"),
                                       ("wv", "self_attn.v_proj.weight"), ("wo", "self_attn.o_proj.weight"),
                                       ("wg", "mlp.gate_proj.weight"), ("wu", "mlp.up_proj.weight"),
                                       ("wd", "mlp.down_proj.weight")]}
    params["n1"] = jnp.stack([jnp.asarray(tensors[f"model.layers.{i}.input_layernorm.weight"]) for i in range(L)])
    params["n2"] = jnp.stack([jnp.asarray(tensors[f"model.layers.{i}.post_attention_layernorm.weight"])
                              for i in range(L)])
    embed, head = jnp.asarray(tensors["model.embed_tokens.weight"]), jnp.asarray(tensors["lm_head.weight"].T)
    final = jnp.asarray(tensors["model.norm.weight"])
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

        def layer(x, args):
            p, k_cache, v_cache = args
            xn = norm(x, p["n1"])
            q = rope((xn @ p["wq"]).reshape(batch, kvh, h // kvh, hd), pos)
            k = rope((xn @ p["wk"]).reshape(batch, kvh, hd), pos)
            v = (xn @ p["wv"]).reshape(batch, kvh, hd)
            k_cache = jax.lax.dynamic_update_slice(k_cache, k[:, :, None], (0, 0, pos, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, v[:, :, None], (0, 0, pos, 0))
            s = jnp.einsum("bkgd,bksd->bkgs", q, k_cache) * hd ** -0.5
            s = jnp.where(visible, s, -jnp.inf)
            att = jnp.einsum("bkgs,bksd->bkgd", jax.nn.softmax(s, -1), v_cache)
            x = x + att.reshape(batch, -1) @ p["wo"]
            xn = norm(x, p["n2"])
            x = x + (jax.nn.silu(xn @ p["wg"]) * (xn @ p["wu"])) @ p["wd"]
            return x, (k_cache, v_cache)

        x, (ks, vs) = jax.lax.scan(layer, embed[tok], (params, ks, vs))
        return jnp.argmax(norm(x, final) @ head, -1), ks, vs

    jitted = jax.jit(step, donate_argnums=(2, 3))
    key = jax.random.PRNGKey(0)
    ks = jax.random.normal(key, (L, batch, kvh, full, hd), jnp.float32)
    vs = jax.random.normal(key, (L, batch, kvh, full, hd), jnp.float32)
    cache_mb = 2 * ks.nbytes / 2 ** 20
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
            stamps.append(time.perf_counter())
        rows[n] = {"tbt_ms": float(np.mean(np.diff(stamps)) * 1e3), "mem_mb": rss_mb() - base}
    return rows, {}


SYSTEMS = {"tempo": run_tempo, "torch": run_torch, "jax": run_jax}


def child(spec: dict) -> dict:
    size = Size(**spec["size"])
    rows, extra = SYSTEMS[spec["system"]](size, spec["batch"], spec["window"], spec["lengths"], spec["last"],
                                          spec.get("tile"))
    return {"rows": {str(k): v for k, v in rows.items()}, **extra}


def run_child(spec: dict, timeout: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    lines = ["| attention | batch | length | " + " | ".join(f"{s} TBT ms" for s in SYSTEMS) + " | "
             + " | ".join(f"{s} MB" for s in SYSTEMS) + " |",
             "|---|---|---|" + "---|" * (2 * len(SYSTEMS))]
    groups = {}
    for r in results:
        groups.setdefault((r["attention"], r["batch"]), {})[r["system"]] = r
    for (attention, batch), by_system in groups.items():
        lengths = sorted({int(n) for r in by_system.values() for n in r.get("rows", {})})
        for n in lengths:
            def cell(system, key):
                row = by_system.get(system, {}).get("rows", {}).get(str(n))
                return "-" if row is None or row.get(key) is None else f"{row[key]:.1f}"
            lines.append(f"| {attention} | {batch} | {n} | " + " | ".join(cell(s, "tbt_ms") for s in SYSTEMS)
                         + " | " + " | ".join(cell(s, "mem_mb") for s in SYSTEMS) + " |")
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
            for row, key in enumerate(("tbt_ms", "mem_mb")):
                ys = [r["rows"][str(n)][key] for n in ns]
                axes[row][col].plot(ns, [np.nan if y is None else y for y in ys], marker="o", label=r["system"])
        axes[0][col].set_title(f"{attention}, batch {batch}")
        axes[0][col].set_ylabel("time between tokens (ms)")
        axes[1][col].set_ylabel("memory growth (MB)")
        for row in range(2):
            axes[row][col].set_xscale("log", base=2)
            axes[row][col].set_xlabel("sequence length")
            axes[row][col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny lengths and batch, to check the script")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--batches", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--lengths", nargs="+", type=int, default=[256, 512, 1024, 2048])
    parser.add_argument("--causal-max", type=int, default=None,
                        help="the longest length for causal attention (default: the longest of --lengths)")
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--attentions", nargs="+", default=["causal", "window"], choices=["causal", "window"])
    parser.add_argument("--last", type=int, default=16, help="tokens timed at each length")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per run")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "decode.json"))
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(ns.child))))
        return
    size = Size()
    if ns.quick:
        ns.batches, ns.lengths, ns.window, ns.last = [2], [32, 64], 16, 8
    results = []
    started = time.perf_counter()
    for attention in ns.attentions:
        lengths = ns.lengths
        if attention == "causal" and ns.causal_max:
            lengths = [n for n in lengths if n <= ns.causal_max]
        for batch in ns.batches:
            for system in ns.systems:
                spec = {"system": system, "batch": batch, "lengths": lengths, "last": ns.last,
                        "window": ns.window if attention == "window" else None, "size": asdict(size)}
                t0 = time.perf_counter()
                out = run_child(spec, ns.timeout)
                out.update(system=system, batch=batch, attention=attention if attention == "causal"
                           else f"window {ns.window}", wall_s=time.perf_counter() - t0)
                print(f"{system:5s} {attention:6s} batch {batch:2d}: {time.perf_counter() - t0:7.1f} s"
                      f"{'  ' + out['error'] if 'error' in out else ''}", flush=True)
                results.append(out)
    print(table(results))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    report = {"size": asdict(size), "parameters": size.parameters(), "last": ns.last, "window": ns.window,
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared",
              "commit": commit.strip(), "seconds": time.perf_counter() - started, "results": results}
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    with open(ns.out, "w") as f:
        json.dump(report, f, indent=1)
    plot(results, os.path.splitext(ns.out)[0] + ".png")
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
