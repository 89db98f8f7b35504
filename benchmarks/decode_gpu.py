"""LLM decoding on a GPU: Tempo on the JAX backend against transformers, and the memory-bandwidth floor.

The model has the sizes of ``decode_floor.py``'s (a published 135M-parameter
Llama-family model: 30 layers, hidden 576, 9 heads and 3 key/value heads,
intermediate 1,536, vocabulary 49,152, tied embeddings) with random float32
weights (normal / sqrt(fan in), norms one), made once from a seed and handed
to every system under Hugging Face's tensor names. Sequences start from
one-token prompts (ids 1, 2, ...) and are decoded greedily, ``batch`` of them
together (one step is a token of every sequence), at each batch size of
``--batch`` and each length of ``--lengths`` (the tokens a sequence holds at
the last timed step):

- **tempo**: ``tpo.llm.Llama.generate`` on the JAX backend on ``--device``
  (``jax:gpu``), causal attention: the decoding loop runs as one device program
  per launch of several steps (``tempo.transforms.masked_reads``: K/V buffers
  of the run's length carried through the loop), one run per batch and length;
- **transformers**: ``LlamaForCausalLM`` (float32, ``--attn-implementation``,
  default ``sdpa``) on the same device, its own ``generate`` with its dynamic
  K/V cache, uncompiled;
- **transformers-static**: the same with ``cache_implementation="static"``
  (transformers compiles the decoding step with ``torch.compile`` where it can:
  the first step's time holds that compile).

Timing. Tempo's tokens reach the host a launch at a time (``on_token`` is
called after each launch; the host reads the tokens, so the device has finished
them): the time of a launch is the wall time from the last token of the
launch before to its own last token, over the steps it ran, and the time per
step at a length is the median of that over the launches whose steps lie in
the last ``--last`` steps of the run (``ms``; ``mean_ms``: their total time over
their steps). The compile times are apart: ``compile_s`` is Tempo's compiler,
``first_token_s`` the time from the call to the first new token (compiling,
the prompt's step and its XLA compile), ``first_launch_s`` the first launch of
the decoding loop (XLA compiling it and its steps). transformers is prefilled
with a random prompt up to ``--last`` and a few warm-up steps before the
length, then decodes to it; a logits processor synchronises the device
(``torch.cuda.synchronize``) and stamps the wall clock at every step, and its
time per step is the median of the last ``--last`` steps. Per token: per step
over the batch.

Floor. The device's copy bandwidth is measured in the same run (a jitted
``a + 1`` over a float32 buffer of ``--copy-mb`` MiB with JAX, a ``copy_``
with torch; bytes read and written over the best of several passes); the
floor of a step is the bytes it must read (every weight once for the whole
batch, one embedding row per sequence aside, and every sequence's keys and
values up to the length) over the better of the two rates.

Token check: each system's first ``--check-tokens`` greedy tokens from the
one-token prompts; each Tempo row records how many equal transformers' at the
same batch (``same_tokens``). JAX's float32 products run at
``--jax-precision`` (default ``highest``: full float32, as torch's default).

Robustness. Each framework runs in its own worker process (Tempo/JAX and
torch), fed one configuration at a time; an error is recorded in its row and
the run goes on; the JSON is rewritten (atomically) after every row. The work
runs most important first (the first two batch sizes at 1,024, both systems;
the copy bandwidth; then the other batch sizes and lengths, the longest last;
the static-cache rows at the end), and a configuration that would start after
``--budget-s`` seconds is skipped (``skipped`` in the JSON), one running at
that moment stopped (and a worker that takes over three minutes to set up).

    python3 benchmarks/decode_gpu.py --device gpu --out $OUT/decode_gpu_h200.json
    .venv/bin/python benchmarks/decode_gpu.py --device cpu --quick --out /tmp/decode_gpu_quick.json

On a machine without the project's dependencies, ``tools/device_wheels.sh``
fetches the missing ones as wheels (``docs/_draft_gpu.md``). Prints a table and
writes the JSON (default ``$OUT/decode_gpu_h200.json`` where ``OUT`` is set, else
the docs' results folder).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, replace

import numpy as np

from decode import ROOT, Size, model_config
from decode_floor import ONE_THREAD, SIZE, first_tokens

MARK = "@@decode_gpu "  # a worker's replies on its stdout begin so (libraries may print there too)
QUICK_SIZE = Size(vocab=512, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2)
EPS = 1e-6  # the RMS norms' epsilon, the same for both systems
SYSTEMS = ("tempo", "transformers", "transformers-static")
WORKER = {"tempo": "jax", "transformers": "torch", "transformers-static": "torch"}  # system -> its process
WARM_STEPS = {"transformers": 4, "transformers-static": 8}  # decoded before the timed steps
SETUP_S = 180.0  # the longest a worker may take to set up (import, make the model, reach the device)


# ----- the model -----
def hf_tensors(size: Size, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights of ``size`` under Hugging Face's Llama names, the embedding tied to the
    head (no ``lm_head.weight``): matrices normal / sqrt(fan in), norms one."""
    rng = np.random.default_rng(seed)

    def normal(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(np.sqrt(cols))

    hd, ones = size.head_dim, np.ones(size.hidden, np.float32)
    tensors = {"model.embed_tokens.weight": normal(size.vocab, size.hidden), "model.norm.weight": ones}
    for i in range(size.layers):
        for name, rows, cols in [("self_attn.q_proj", size.heads * hd, size.hidden),
                                 ("self_attn.k_proj", size.kv_heads * hd, size.hidden),
                                 ("self_attn.v_proj", size.kv_heads * hd, size.hidden),
                                 ("self_attn.o_proj", size.hidden, size.heads * hd),
                                 ("mlp.gate_proj", size.intermediate, size.hidden),
                                 ("mlp.up_proj", size.intermediate, size.hidden),
                                 ("mlp.down_proj", size.hidden, size.intermediate)]:
            tensors[f"model.layers.{i}.{name}.weight"] = normal(rows, cols)
        for name in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{name}.weight"] = ones
    return tensors


def weight_bytes(size: Size) -> int:
    """The bytes of weights a decoding step reads: every matrix and norm once, the tied head once
    (the embedding lookup's rows aside)."""
    return 4 * (size.parameters() - size.vocab * size.hidden)


def kv_bytes(size: Size, batch: int, length: int) -> int:
    """The bytes of float32 keys and values a step reads at ``length`` positions."""
    return 2 * size.layers * batch * size.kv_heads * size.head_dim * length * 4


# ----- the Tempo worker (JAX) -----
def jax_worker(spec: dict) -> tuple[dict, dict]:
    import jax

    jax.config.update("jax_default_matmul_precision", spec["jax_precision"])
    import jaxlib

    import tempo as tpo
    from tempo.llm.weights import Weights
    from tempo.runtime.backends import get_backend

    size = Size(**spec["size"])
    config = replace(model_config(size, spec["max_positions"]), tie_word_embeddings=True, rms_norm_eps=EPS)
    model = tpo.llm.Llama(config, Weights.from_tensors(hf_tensors(size), config, "random weights"))
    backend = f"jax:{spec['device']}"
    device = get_backend(backend).device

    def decode(batch: int, length: int, last: int, check: int) -> dict:
        stamps = {}

        def on_token(tokens, position):
            ledger = getattr(model.last_program, "ledger", None)
            stamps[position] = (time.perf_counter(), position if ledger is None else ledger.launches)

        model.last_program = None
        start = time.perf_counter()
        ids = model.generate(first_tokens(batch)[:, None], length - 1, attention="causal", stop_at_eos=False,
                             backend=backend, on_token=on_token)
        total = time.perf_counter() - start
        timings = model.last_program.timings
        model.last_program = None                   # its device buffers freed before the next run
        runs = launch_runs({p: s for p, s in stamps.items() if p < length - 1})  # the last: reported after the run
        first = runs[0][3]  # the first new token's arrival
        return {**steady_step(runs, length - 1 - last, length - 1),
                "compile_s": sum(v for k, v in timings.items() if k != "run"), "run_s": timings["run"],
                "first_token_s": first - start, "first_launch_s": runs[1][3] - first if len(runs) > 1 else None,
                "total_s": total, "tokens": ids[:, 1:1 + check].tolist()}

    info = {"versions": {"python": platform.python_version(), "numpy": np.__version__, "jax": jax.__version__,
                         "jaxlib": jaxlib.__version__},
            "device": f"{device.device_kind} ({device.platform})", "jax_precision": spec["jax_precision"]}
    return info, {"decode": decode, "bandwidth": lambda nbytes: jax_copy_rate(device, nbytes)}


def launch_runs(stamps: dict) -> list[tuple[int, int, int, float]]:
    """The launches the tokens came from, in order: (launch, first position, last position, wall
    time of its last token), from ``stamps`` (position -> (wall time, the run's launch count when
    the token arrived): the tokens of one launch arrive together, under one count)."""
    runs = []
    for position in sorted(stamps):
        wall, launch = stamps[position]
        if runs and runs[-1][0] == launch:
            runs[-1] = (launch, runs[-1][1], position, wall)
        else:
            runs.append((launch, position, position, wall))
    return runs


def steady_step(runs: list[tuple], start: int, stop: int) -> dict:
    """The time per step of the launches whose positions lie in ``[start, stop)`` (each launch's time
    is from the last token of the one before): ``ms`` the median over the launches of the most steps
    among them (a shorter last one aside), ``mean_ms`` their total time over their steps, with the
    launches and steps counted. Where no launch lies wholly inside, those that overlap it."""
    spans = [(run[2] - run[1] + 1, run[3] - before[3]) for before, run in zip(runs, runs[1:])
             if run[1] >= start and run[2] < stop]
    if not spans:
        spans = [(run[2] - run[1] + 1, run[3] - before[3]) for before, run in zip(runs, runs[1:])
                 if run[2] >= start and run[1] < stop]
    most = max(steps for steps, _ in spans)
    return {"ms": 1e3 * statistics.median(s / steps for steps, s in spans if steps == most),
            "mean_ms": 1e3 * sum(s for _, s in spans) / sum(steps for steps, _ in spans),
            "launch_steps": most, "launches_timed": len(spans), "steps_timed": sum(steps for steps, _ in spans)}


def jax_copy_rate(device, nbytes: int, passes: int = 10) -> dict:
    """GB/s read and written by a jitted ``a + 1`` over a float32 buffer of ``nbytes`` on ``device``,
    the best of ``passes`` after a warm-up (each pass waits for its result)."""
    import jax

    held = [jax.device_put(np.ones(nbytes // 4, np.float32), device)]
    add = jax.jit(lambda x: x + 1.0, donate_argnums=0)  # the result in the donated buffer: no allocation

    def once():
        held[0] = add(held[0])
        held[0].block_until_ready()

    once()
    best = min(_wall(once) for _ in range(passes))
    return {"gb_s": 2 * held[0].nbytes / best / 1e9, "bytes": held[0].nbytes, "best_s": best,
            "how": "jax.jit(x + 1), donated"}


def _wall(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ----- the transformers worker (torch) -----
def torch_worker(spec: dict) -> tuple[dict, dict]:
    import torch
    import transformers

    size, on_gpu = Size(**spec["size"]), spec["device"] != "cpu"
    device = torch.device("cuda" if on_gpu else "cpu")
    if not on_gpu:
        torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products in float32 (torch's default, said here)
    config = transformers.LlamaConfig(
        vocab_size=size.vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
        num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim, max_position_embeddings=spec["max_positions"], rms_norm_eps=EPS,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation=spec["attn_implementation"])
    model = transformers.LlamaForCausalLM(config).eval()
    tensors = hf_tensors(size)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    model = model.to(device=device, dtype=torch.float32)
    del tensors

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    class Stamp(transformers.LogitsProcessor):
        """Waits for the device and stamps the wall clock: called once per new token."""

        def __init__(self):
            self.stamps = []

        def __call__(self, input_ids, scores):
            sync()
            self.stamps.append(time.perf_counter())
            return scores

    def generate(ids: np.ndarray, new: int, **options):
        stamp = Stamp()
        prompt = torch.tensor(ids, device=device)
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                                 do_sample=False, pad_token_id=0, logits_processor=[stamp], **options)
        sync()
        return out[:, ids.shape[1]:].cpu().numpy(), stamp.stamps

    def decode(batch: int, length: int, last: int, check: int, static: bool = False) -> dict:
        warm = WARM_STEPS["transformers-static" if static else "transformers"]
        prompt_len = max(1, length - last - warm - 1)
        prompt = np.random.default_rng(0).integers(1, size.vocab, (batch, prompt_len))
        options = {"cache_implementation": "static"} if static else {}
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        _, stamps = generate(prompt, length - prompt_len, **options)
        steps = np.diff(stamps)
        out = {"ms": 1e3 * float(np.median(steps[-last:])), "mean_ms": 1e3 * float(np.mean(steps[-last:])),
               "steps_timed": int(min(last, len(steps))), "prompt": prompt_len,
               "prefill_s": stamps[0] - start, "first_step_s": float(steps[0]), "total_s": stamps[-1] - start}
        if on_gpu:
            out["peak_mb"] = torch.cuda.max_memory_allocated() / 1e6
        if not static:
            out["tokens"] = generate(first_tokens(batch)[:, None], check)[0].tolist()
        if on_gpu:
            torch.cuda.empty_cache()
        return out

    def bandwidth(nbytes: int, passes: int = 10) -> dict:
        a = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        b = torch.empty_like(a)

        def copy():
            b.copy_(a)
            sync()

        copy()
        best = min(_wall(copy) for _ in range(passes))
        return {"gb_s": 2 * a.nbytes / best / 1e9, "bytes": a.nbytes, "best_s": best, "how": "torch copy_"}

    info = {"versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                         "cuda": torch.version.cuda, "transformers": transformers.__version__},
            "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
            "attn_implementation": spec["attn_implementation"]}
    return info, {"decode": decode, "bandwidth": bandwidth}


def serve(kind: str, spec: dict) -> None:
    """A worker: set up, reply with what it runs on, then answer one job a line from stdin."""
    def reply(message: dict) -> None:
        print(MARK + json.dumps(message), flush=True)

    try:
        info, handlers = {"jax": jax_worker, "torch": torch_worker}[kind](spec)
    except Exception as err:
        traceback.print_exc()
        reply({"ready": False, "error": describe(err)})
        return
    reply({"ready": True, **info})
    for line in sys.stdin:
        job = json.loads(line)
        try:
            reply(handlers[job["what"]](**job["args"]))
        except Exception as err:
            traceback.print_exc()
            reply({"error": describe(err)})


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:600]


# ----- the parent: workers, order, budget, report -----
class Worker:
    """A worker process (:func:`serve`) and the replies it prints, read by a thread."""

    def __init__(self, kind: str, spec: dict, env: dict):
        self.kind, self.replies = kind, queue.Queue()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", kind, json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=ROOT, start_new_session=True)
        self.info = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            at = line.find(MARK)  # a library's output without a newline may come first
            if at < 0:
                sys.stderr.write(f"[{self.kind}] {line}")
                continue
            try:
                self.replies.put(json.loads(line[at + len(MARK):]))
            except ValueError as err:
                self.replies.put({"error": f"the {self.kind} worker's reply did not parse ({err})"})
        self.replies.put({"error": f"the {self.kind} worker exited (code {self.proc.wait()})"})

    def ready(self, timeout: float) -> dict:
        """Its setup's reply (waiting up to ``timeout`` seconds for it)."""
        if self.info is None:
            self.info = self._reply(timeout, "setting up")
        return self.info

    def ask(self, what: str, args: dict, timeout: float) -> dict:
        info = self.ready(timeout)
        if not info.get("ready"):
            return {"error": info.get("error", "the worker did not start")}
        try:
            self.proc.stdin.write(json.dumps({"what": what, "args": args}) + "\n")
            self.proc.stdin.flush()
        except OSError as err:  # it has ended: its reply saying so is in the queue
            self.replies.put({"error": f"the {self.kind} worker ended ({err})"})
        return self._reply(timeout, what)

    def _reply(self, timeout: float, doing: str) -> dict:
        try:
            return self.replies.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            self.stop()
            return {"error": f"no reply within {timeout:.0f} s ({doing}): stopped", "stopped": True}

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def work_order(systems: list[str], batches: list[int], lengths: list[int]) -> list[tuple]:
    """The jobs, most important first: ``(system, batch, length)``, and ``("bandwidth", None, None)``
    after the first two batch sizes at the main length (1,024 where it is one of ``lengths``, else
    the first); then the other batch sizes there, then the other lengths, shortest first; the
    static-cache rows after all the others, in the same order."""
    main = 1024 if 1024 in lengths else lengths[0]
    configs = [(b, main) for b in batches] + [(b, n) for n in sorted(set(lengths) - {main}) for b in batches]
    plain = [s for s in systems if s != "transformers-static"]
    jobs = [(s, b, n) for b, n in configs for s in plain]
    first = len(plain) * min(2, len(batches))
    jobs = jobs[:first] + [("bandwidth", None, None)] + jobs[first:]
    return jobs + [("transformers-static", b, n) for b, n in configs if "transformers-static" in systems]


def floor_fields(row: dict, size: Size, rate: float | None) -> dict:
    """A timed row's bytes read per step, its floor at the copy rate ``rate`` (GB/s) and its time
    over the floor; per token (over the batch) too."""
    out = {"ms_per_token": row["ms"] / row["batch"],
           "mb_per_step": (weight_bytes(size) + kv_bytes(size, row["batch"], row["length"])) / 1e6}
    if rate:
        out["floor_ms"] = out["mb_per_step"] / rate
        out["floor_ms_per_token"] = out["floor_ms"] / row["batch"]
        out["x_floor"] = row["ms"] / out["floor_ms"]
    return out


def same_tokens(mine: list, theirs: list) -> dict:
    """How many of the first greedy tokens two systems picked are the same, and the first step where
    they differ (None where none does)."""
    a, b = np.array(mine), np.array(theirs)
    n = min(a.shape[1], b.shape[1])
    differ = np.nonzero((a[:, :n] != b[:, :n]).any(axis=0))[0]
    return {"same": int((a[:, :n] == b[:, :n]).sum()), "tokens": int(a[:, :n].size),
            "first_difference": int(differ[0]) if len(differ) else None}


def report(rows: list[dict], rates: dict, size: Size) -> list[dict]:
    """The rows with their floors (at the best copy rate measured) and token checks."""
    rate = max((r["gb_s"] for r in rates.values() if "gb_s" in r), default=None)
    reference = {r["batch"]: r["tokens"] for r in rows if r["system"] == "transformers" and "tokens" in r}
    out = []
    for r in rows:
        r = dict(r)
        if "ms" in r:
            r.update(floor_fields(r, size, rate))
        if r["system"] == "tempo" and "tokens" in r and r["batch"] in reference:
            r["same_tokens"] = same_tokens(r["tokens"], reference[r["batch"]])
        out.append(r)
    return out


def table(rows: list[dict], skipped: list[dict]) -> str:
    lines = ["| system | batch | length | ms per step | ms per token | x floor | floor ms | steps a launch | compile s "
             "| first token s | first launch / step s | same tokens as transformers |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['system']} | {r['batch']} | {r['length']} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} | | | | | | | | |")
            continue
        first = r.get("first_launch_s", r.get("first_step_s"))
        same = r.get("same_tokens")
        same = f"{same['same']}/{same['tokens']}" if same else ""
        lines.append(f"{head} {r['ms']:.3f} | {r['ms_per_token']:.3f} | {_num(r.get('x_floor'), 2)} | "
                     f"{_num(r.get('floor_ms'), 3)} | {r.get('launch_steps', '')} | {_num(r.get('compile_s'), 1)} | "
                     f"{_num(r.get('first_token_s'), 1)} | {_num(first, 2)} | {same} |")
    lines += [f"skipped: {s['system']}" + (f" batch {s['batch']} length {s['length']}" if s["batch"] else "")
              + f" ({s['why']})" for s in skipped]
    return "\n".join(lines)


def _num(value, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="gpu", choices=["gpu", "cuda", "cpu"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16], help="sequences decoded together")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096],
                        help="tokens per sequence at the last timed step")
    parser.add_argument("--last", type=int, default=64, help="steps timed at the end of each run")
    parser.add_argument("--check-tokens", type=int, default=16, help="greedy tokens compared between the systems")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="seconds after which no configuration starts (one running then is stopped)")
    parser.add_argument("--copy-mb", type=int, default=2048, help="the buffer of the copy-bandwidth measurement")
    parser.add_argument("--jax-precision", default="highest", help="jax_default_matmul_precision for Tempo")
    parser.add_argument("--attn-implementation", default="sdpa", help="transformers' attention")
    parser.add_argument("--quick", action="store_true", help="a tiny model and short lengths, to check the script")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT") or os.path.join(ROOT, "docs", "results"),
                                                      "decode_gpu_h200.json"))
    ns = parser.parse_args()
    if ns.worker:
        serve(ns.worker[0], json.loads(ns.worker[1]))
        return
    started = time.perf_counter()
    device = "gpu" if ns.device == "cuda" else ns.device
    size = QUICK_SIZE if ns.quick else Size(**SIZE)
    if ns.quick:
        ns.batch, ns.lengths, ns.last, ns.check_tokens, ns.copy_mb = [1, 2], [48], 32, 8, 64
    spec = {"size": asdict(size), "device": device, "max_positions": max(ns.lengths) + 1,
            "jax_precision": ns.jax_precision, "attn_implementation": ns.attn_implementation}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
           "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
           "PYTHONUNBUFFERED": "1", **(ONE_THREAD if device == "cpu" else {})}
    kinds = sorted({WORKER[s] for s in ns.systems})
    workers = {kind: Worker(kind, spec, env) for kind in kinds}  # their setups run at once
    rows, rates, skipped, ready = [], {}, [], {}

    def left() -> float:
        return ns.budget_s - (time.perf_counter() - started)

    def save() -> None:
        data = {"script": "benchmarks/decode_gpu.py", "commit": git_commit(), "quick": ns.quick, "device": device,
                "size": asdict(size), "parameters": size.parameters(), "weight_bytes": weight_bytes(size),
                "settings": {k: getattr(ns, k) for k in ("batch", "lengths", "last", "check_tokens", "systems",
                                                         "budget_s", "copy_mb", "jax_precision",
                                                         "attn_implementation")},
                "workers": ready, "bandwidth": rates, "rows": report(rows, rates, size), "skipped": skipped,
                "seconds": time.perf_counter() - started}
        os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
        with open(ns.out + ".part", "w") as f:
            json.dump(data, f, indent=1)
        os.replace(ns.out + ".part", ns.out)

    for kind, worker in workers.items():
        ready[kind] = worker.ready(min(left(), SETUP_S))
        print(f"{kind} worker: {ready[kind]}", flush=True)
    for system, batch, length in work_order(ns.systems, ns.batch, ns.lengths):
        if left() <= 0:
            skipped.append({"system": system, "batch": batch, "length": length,
                            "why": f"over the time budget of {ns.budget_s:.0f} s"})
            continue
        if system == "bandwidth":
            for kind in kinds:
                rates[kind] = _ask(workers, kind, spec, env, "bandwidth", {"nbytes": ns.copy_mb * 2 ** 20}, left())
                print(f"copy bandwidth ({kind}): {rates[kind]}", flush=True)
            save()
            continue
        args = {"batch": batch, "length": length, "last": ns.last, "check": ns.check_tokens}
        if system == "transformers-static":
            args["static"] = True
        at = time.perf_counter() - started
        out = _ask(workers, WORKER[system], spec, env, "decode", args, left())
        rows.append({"system": system, "batch": batch, "length": length, "started_s": at, **out})
        said = out["error"] if "error" in out else f"{out['ms']:.3f} ms per step"
        print(f"{system} batch {batch} length {length}: {said}", flush=True)
        save()
    for worker in workers.values():
        worker.stop()
    save()
    print(table(report(rows, rates, size), skipped))
    print(f"wrote {ns.out}")


def _ask(workers: dict, kind: str, spec: dict, env: dict, what: str, args: dict, timeout: float) -> dict:
    """``what`` asked of the ``kind`` worker, started again first where it had set up and has ended
    since (stopped at a time limit, or crashed in an earlier job)."""
    worker = workers[kind]
    if not worker.alive and (worker.info or {}).get("ready"):
        workers[kind] = Worker(kind, spec, env)
    return workers[kind].ask(what, args, timeout)


if __name__ == "__main__":
    main()
