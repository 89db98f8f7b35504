"""Products of few rows by large weight matrices on NumPy: the matrix as it is against column panels.

The evidence behind ``NumPyBackend.weight_panel`` (:mod:`tempo.transforms.pack_weights`):
``x (m, k) @ W (k, n)`` against ``W`` stored as ``n / r`` panels ``(n / r, k, r)``, multiplied
panel by panel and put back in order, as the packed program computes it, for the weight shapes
of the decode benchmark's model (``benchmarks/decode.py``, hidden 512). Enough distinct
matrices are cycled that they come from memory, not the cache, as in decoding; the figure is
the GB/s of weights read (higher is faster), the best of 5 passes, on one BLAS thread.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/matmul_panels.py

Prints a table and writes ``docs/results/matmul_panels.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(512, 1536), (512, 2816), (1408, 512), (512, 512), (512, 8192)]  # wqkv, gate+up, down, wo, head


def rate(product, weights: list, xs: list, nbytes: int, passes: int = 5) -> float:
    """GB/s of weights read by ``product(x, w)`` over every weight, the best of ``passes``."""
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for ws in weights:
            for x, w in zip(xs, ws):
                product(x, w)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--widths", nargs="+", type=int, default=[16, 32, 64, 128])
    parser.add_argument("--copies", type=int, default=12, help="distinct matrices per shape (memory, not cache)")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "matmul_panels.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    plain = [[rng.standard_normal(s, dtype=np.float32) for s in SHAPES] for _ in range(args.copies)]
    nbytes = sum(w.nbytes for ws in plain for w in ws)
    rows_out = []
    print(f"{nbytes / 1e6:.0f} MB of weights per pass; GB/s of weights read (one thread)")
    print("| rows | as is | " + " | ".join(f"panels of {r}" for r in args.widths) + " |")
    print("|" + " --- |" * (2 + len(args.widths)))
    for m in args.rows:
        xs = [rng.standard_normal((m, s[0]), dtype=np.float32) for s in SHAPES]
        row = {"rows": m, "as_is": rate(lambda x, w: x @ w, plain, xs, nbytes), "panels": {}}
        for r in args.widths:
            packed = [[np.ascontiguousarray(w.reshape(w.shape[0], -1, r).transpose(1, 0, 2)) for w in ws]
                      for ws in plain]
            row["panels"][r] = rate(lambda x, p: np.matmul(x[None], p).transpose(1, 0, 2).reshape(x.shape[0], -1),
                                    packed, xs, nbytes)
            del packed
        rows_out.append(row)
        print(f"| {m} | {row['as_is']:.1f} | " + " | ".join(f"{row['panels'][r]:.1f}" for r in args.widths) + " |",
              flush=True)
    result = {"machine": platform.processor() or platform.machine(), "numpy": np.__version__,
              "threads": os.environ.get("OPENBLAS_NUM_THREADS"), "weights_mb": nbytes / 1e6, "rows": rows_out}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.out)
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
