"""A decoding step on NumPy with its attention as one native call a layer, and as its steps, alternating in one process.

The NumPy backend runs a decoding step's attention (the scores against the
step's keys, the prompt's scores, one softmax over both, the products with the
values) as one line of its fused island calling
:func:`tempo.runtime.backends.numpy_attention.step`, one native call a layer for
every (sequence, head) pair; without that line the island runs the ~16 steps
one by one (two native products and NumPy passes over the scores). This script
decodes the 135M-parameter model of ``benchmarks/decode_floor.py`` (random
weights, float32, one-token prompts, greedy, one thread) both ways in one
process, alternating run by run (``--runs`` pairs), so that both see the same
machine: on a shared machine the load moves between separate runs by more
than the difference. A run's figure is the mean CPU time (and the median wall
time) per step over the ``--last`` steps before each length of ``--lengths``.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/decode_attention_line.py --batch 4 --lengths 256

Prints a table and writes ``docs/results/decode_attention_line.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import tempo as tpo  # noqa: E402
from tempo.files import write_json_atomic  # noqa: E402
from tempo.llm.config import LlamaConfig  # noqa: E402
from tempo.runtime.backends import numpy_attention, numpy_fused  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
                     num_kv_heads=3, head_dim=64, max_positions=8192, rms_norm_eps=1e-5, tie_word_embeddings=True)
WAYS = {"one call": numpy_fused._attention_steps, "steps": lambda op, call_of: {}}


def decode(model, batch: int, lengths: list[int], last: int) -> dict:
    """Per length: the mean CPU ms and the median wall ms per step over the ``last`` steps before it."""
    stamps = {}
    model.generate(np.arange(1, batch + 1)[:, None], max(lengths) - 1, stop_at_eos=False,
                   on_token=lambda tokens, p: stamps.__setitem__(p, (time.perf_counter(), time.process_time())))
    out = {}
    for n in lengths:
        d = np.array([np.subtract(stamps[p], stamps[p - 1]) for p in range(n - last, n)])
        out[str(n)] = {"cpu_ms": 1e3 * float(np.mean(d[:, 1])), "ms": 1e3 * float(np.median(d[:, 0]))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256])
    parser.add_argument("--last", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs, each way once a pair")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "decode_attention_line.json"))
    args = parser.parse_args()
    if numpy_attention.library() is None:
        raise SystemExit(numpy_attention.unavailable())
    model = tpo.llm.Llama.random(CONFIG)
    runs = []
    for run in range(args.runs):
        for way, finder in WAYS.items():
            numpy_fused._attention_steps = finder
            rows = decode(model, args.batch, args.lengths, args.last)
            runs.append({"run": run, "way": way, "load_average": os.getloadavg(), "rows": rows})
            print(f"run {run} {way}: {rows}", flush=True)
    numpy_fused._attention_steps = WAYS["one call"]
    print("| length | way | CPU ms per step, each run | mean | wall ms per step, each run |")
    print("|---|---|---|---|---|")
    for n in map(str, args.lengths):
        for way in WAYS:
            cpu = [r["rows"][n]["cpu_ms"] for r in runs if r["way"] == way]
            wall = [r["rows"][n]["ms"] for r in runs if r["way"] == way]
            print(f"| {n} | {way} | {', '.join(f'{c:.1f}' for c in cpu)} | {np.mean(cpu):.1f} | "
                  f"{', '.join(f'{w:.1f}' for w in wall)} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    write_json_atomic(args.out, {"commit": commit.strip(), "batch": args.batch, "lengths": args.lengths,
                                 "last": args.last, "machine": platform.processor() or platform.machine(),
                                 "cpus": os.cpu_count(), "runs": runs})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
