"""A decoding step's elementwise chains on NumPy: each step a NumPy call, against one row program a chain.

One layer of ``benchmarks/decode_floor.py``'s 135M-parameter model runs four
chains of float32 elementwise steps in its fused islands: the RMSNorm before
attention (5 steps over rows of 576), the rotary products and sum of the
queries' and keys' 12 heads of 64 (3 steps), the residual add and RMSNorm
before the MLP (6 steps) and SwiGLU's sigmoid and products over rows of 1,536
(3 steps). Each chain is built as a fused island with the steps' shapes for
each of ``--batch`` rows and compiled by the NumPy backend twice: with every
step its NumPy call (the default) and with row programs
(:mod:`tempo.runtime.backends.numpy_rows`: one native call for the chain). The
two are timed alternately, ``--passes`` times ``--calls`` calls each, by the
process CPU clock (one thread); the figure is the median over the passes of
the microseconds a call, and a step's 30 layers.

    .venv/bin/python benchmarks/numpy_rows.py

Prints the table and writes ``docs/results/numpy_rows_chains.json``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import argparse  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tempo.files import write_json_atomic  # noqa: E402
from tempo.ir import ops  # noqa: E402
from tempo.runtime.backends.numpy import NumPyBackend  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HIDDEN, INTERMEDIATE, HEADS, HEAD = 30, 576, 1536, 12, 64  # 9 query and 3 key heads


def step(fn: str, inputs: tuple, shape: tuple) -> ops.FusedStep:
    op = ops.ReduceOp("mean", (-1,), keepdims=True) if fn == "mean" else ops.ElementwiseOp(fn)
    return ops.FusedStep(op=op, inputs=inputs, dtypes=("float32",), shapes=(shape,))


def chains(batch: int) -> dict[str, tuple[ops.FusedOp, list]]:
    """A layer's chains: name -> (the island, its inputs' shapes, () for the scalars eps and -0.5)."""
    h, c, heads, g = (batch, HIDDEN), (batch, 1), (batch, HEADS, HEAD), (batch, INTERMEDIATE)
    norm = (step("mul", ((-1, 0), (-1, 0)), h), step("mean", ((0, 0),), c), step("add", ((1, 0), (-1, 1)), c),
            step("pow", ((2, 0), (-1, 2)), c), step("mul", ((-1, 0), (3, 0)), h))
    rotary = (step("mul", ((-1, 0), (-1, 1)), heads), step("mul", ((-1, 2), (-1, 3)), heads),
              step("add", ((0, 0), (1, 0)), heads))
    residual = (step("add", ((-1, 0), (-1, 1)), h), step("mul", ((0, 0), (0, 0)), h), step("mean", ((1, 0),), c),
                step("add", ((2, 0), (-1, 2)), c), step("pow", ((3, 0), (-1, 3)), c), step("mul", ((0, 0), (4, 0)), h))
    swiglu = (step("sigmoid", ((-1, 0),), g), step("mul", ((-1, 0), (0, 0)), g), step("mul", ((1, 0), (-1, 1)), g))
    return {"RMSNorm": (ops.FusedOp(steps=norm, outputs=((4, 0),)), [h, (), ()]),
            "rotary": (ops.FusedOp(steps=rotary, outputs=((2, 0),)), [heads, (HEAD,), heads, (HEAD,)]),
            "residual add and RMSNorm": (ops.FusedOp(steps=residual, outputs=((0, 0), (5, 0))), [h, h, (), ()]),
            "SwiGLU": (ops.FusedOp(steps=swiglu, outputs=((2, 0),)), [g, g])}


def inputs_of(shapes: list, rng) -> list:
    """Arrays of ``shapes``; the scalars are eps (the first) and the exponent -0.5."""
    scalars = iter([1e-5, -0.5])
    return [np.array(next(scalars), np.float32) if shape == () else rng.uniform(0.5, 2, size=shape).astype(np.float32)
            for shape in shapes]


def per_call(kernel, inputs: list, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        kernel(inputs, {}, ())
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "numpy_rows_chains.json"))
    args = parser.parse_args()
    rng, rows = np.random.default_rng(0), []
    print("| batch | chain | NumPy calls | NumPy us a call (CPU) | row program us a call (CPU) |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        totals = {"numpy": 0.0, "rows": 0.0}
        for name, (island, shapes) in chains(batch).items():
            inputs = inputs_of(shapes, rng)
            kernels = {"numpy": NumPyBackend().kernel(island), "rows": NumPyBackend(row_programs=True).kernel(island)}
            times = {k: [] for k in kernels}
            for _ in range(args.passes):
                for k, kernel in kernels.items():
                    times[k].append(per_call(kernel, inputs, args.calls))
            us = {k: float(np.median(t)) for k, t in times.items()}
            rows.append({"batch": batch, "chain": name, "steps": len(island.steps),
                         **{f"{k}_us": v for k, v in us.items()}})
            totals = {k: totals[k] + us[k] for k in totals}
            print(f"| {batch} | {name} | {len(island.steps)} | {us['numpy']:.2f} | {us['rows']:.2f} |")
        print(f"| {batch} | a step ({LAYERS} layers, ms) | {17 * LAYERS} | {totals['numpy'] * LAYERS / 1e3:.2f} | "
              f"{totals['rows'] * LAYERS / 1e3:.2f} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    write_json_atomic(args.out, {"commit": commit.strip(), "passes": args.passes, "calls": args.calls,
                                 "load_average": os.getloadavg(), "machine": platform.processor() or platform.machine(),
                                 "rows": rows})
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
