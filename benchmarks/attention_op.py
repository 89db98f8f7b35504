"""One layer's prompt attention as attention ops: NumPy ops against the fused NumPy kernel.

The shapes of the 135M-parameter model of ``decode_floor.py`` (batch 1, 3
key/value heads of 3 query heads each, head size 64), a prompt of each
``--prompts`` length in blocks of ``--chunk`` query rows, causal: each block
one :class:`tempo.ir.ops.AttentionOp` over the keys before its end, run by
the NumPy backend's kernels of ``tempo/runtime/backends/numpy_attention.py``
on one thread:

- **numpy ops**: ``reference``, the scores, scaled, masked, their largest, the
  exponentials, their sums, the product and the division as NumPy ops;
- **fused**: ``fused``, a piece of rows at a time, the scores and the product
  by BLAS, the softmax by the native kernel of ``numpy_attention.c``;
- **fused, products only**: the same with the softmax left out (the products'
  share of ``fused``; its numbers are not attention's).

Each time is the whole layer's, the run of ``--repeats`` with the least process CPU time (its wall time beside).

    .venv/bin/python benchmarks/attention_op.py

Prints a table and writes ``docs/results/attention_op.json``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import argparse  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tempo.files import write_json_atomic  # noqa: E402
from tempo.ir import ops  # noqa: E402
from tempo.runtime.backends import numpy_attention  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV_HEADS, GROUPS, HEAD = 3, 3, 64


class SoftmaxLeftOut:
    """A stand-in for the native library whose softmax does nothing: ``fused`` runs its products alone."""

    @staticmethod
    def softmax_rows(*args) -> None:
        return None


def layer(prompt: int, chunk: int, run) -> tuple[float, float]:
    """Wall and CPU seconds of one layer's blocks through ``run(op, q, k, v)``."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, prompt, KV_HEADS, GROUPS, HEAD)).astype(np.float32).transpose(0, 2, 3, 1, 4)
    k, v = (rng.standard_normal((1, prompt, KV_HEADS, HEAD)).astype(np.float32).transpose(0, 2, 1, 3)[:, :, None]
            for _ in "kv")
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, prompt, chunk):
        stop = min(start + chunk, prompt)
        run(ops.AttentionOp(HEAD ** -0.5, rows=start), q[..., start:stop, :], k[..., :stop, :], v[..., :stop, :])
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "attention_op.json"))
    args = parser.parse_args()
    lib = numpy_attention.library()
    if lib is None:
        raise SystemExit(numpy_attention.unavailable())
    kernels = {"numpy ops": numpy_attention.reference,
               "fused": lambda *xs: numpy_attention.fused(*xs, lib),
               "fused, products only": lambda *xs: numpy_attention.fused(*xs, SoftmaxLeftOut())}
    rows = []
    print("| prompt | kernel | one layer's attention s (wall) | CPU s |\n|---|---|---|---|")
    for prompt in args.prompts:
        for name, run in kernels.items():
            with np.errstate(all="ignore"):    # the softmax left out: sums of nothing
                wall, cpu = min((layer(prompt, args.chunk, run) for _ in range(args.repeats)), key=lambda r: r[1])
            rows.append({"prompt": prompt, "kernel": name, "s": wall, "cpu_s": cpu})
            print(f"| {prompt:,} | {name} | {wall:.3f} | {cpu:.3f} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    write_json_atomic(args.out, {"commit": commit.strip(), "load_average": os.getloadavg(), "chunk": args.chunk,
                                 "kv_heads": KV_HEADS, "groups": GROUPS, "head_size": HEAD, "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
