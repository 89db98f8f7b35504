"""Tensor stores: time per step and bytes held, point stores against block and window stores.

Two programs, each compiled once and run at growing bounds with the stores
their reads call for (``auto``) and with point stores only (``point``):

- **causal**: ``score[t] = (k[0:t + 1] * q[t]).sum()``, attention-like over
  every earlier key; ``k`` gets a block store, so each step reads a view
  where point stores stack ``t + 1`` tensors. The compute itself grows with
  ``t``, so time per step grows with ``T`` either way.
- **window**: an episode per iteration, ``h[i, t + 1] = tanh(0.9 h[i, t] +
  0.5 mean(h[i, max(0, t - W + 1):t + 1]))``, the next iteration starting
  from ``h[i, T - 1]`` (the last iteration's episode feeds nothing and does
  not run); ``h`` gets a window store of ``W`` points, a circular
  buffer whose size does not depend on ``T``, where point stores keep the
  episode's ``T`` points until the iteration ends and stack ``W`` per step.

Bytes held: the most the store of ``k`` (causal) or ``h`` (window) held at
the end of any iteration of the program's main loop or at the end of the
run. Times are the fastest of ``--repeats`` runs (the machine is shared).
Prints a table and writes JSON to ``benchmarks/results/stores.json``.

    .venv/bin/python benchmarks/stores.py                       # about two minutes on 2 cores
    .venv/bin/python benchmarks/stores.py --repeats 2            # the fastest of two runs per row
    .venv/bin/python benchmarks/stores.py --causal 1000 --window 1000 --point-causal-max 1000
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

import numpy as np

import tempo as tpo
from tempo.files import write_json_atomic
from tempo.runtime.executor import Executor

HERE = os.path.dirname(os.path.abspath(__file__))


def causal_program(bound: int, width: int):
    """``(k[0:t + 1] * q[t]).sum()`` for every t; returns the program and k."""
    keys = np.random.default_rng(0).standard_normal((bound, width)).astype(np.float32)
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        k = tpo.from_numpy(keys, dims=(t,))
        q = k * 0.5 + 1.0
        score = (k[0:t + 1] * q[t]).sum()
        return ctx.compile(fetch=[score]), k


def window_program(window: int, width: int):
    """An episode over t per iteration i reading a window of W points of its own state h."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        p = tpo.placeholder((width,), "float32", dims=(i,))
        p[0] = tpo.full((width,), 0.1, "float32")
        h = tpo.placeholder((width,), "float32", dims=(i, t))
        h[i, 0] = p[i]
        recent = h[i, tpo.max(0, t - window + 1):t + 1].mean(axis=0)
        h[i, t + 1] = tpo.tanh(h[i, t] * 0.9 + recent * 0.5)
        p[i + 1] = p[i] * 0.5 + h[i, T - 1] * 0.5
        return ctx.compile(fetch=[p]), h


class Measured(Executor):
    """An executor that records the most bytes one store held after any main-loop step (when the
    generated code frees what no later step reads from it)."""

    def __init__(self, *args, watch, **kwargs):
        super().__init__(*args, **kwargs)
        self.watch, self.peak = watch, 0
        store = self.stores[watch]
        free_below = store.free_below

        def measured(axis: int, live) -> None:
            self.peak = max(self.peak, store.nbytes())
            free_below(axis, live)

        store.free_below = measured


def measure(program, rt, bounds: dict[str, int], stores: str, repeats: int, steps: int) -> dict:
    """The fastest of ``repeats`` runs: seconds, microseconds per step (of the ``steps`` that
    run), bytes held by ``rt``'s store, its kind, and the last fetched value."""
    watch = program.sdg.resolve(rt.node.id, rt.out)
    times = []
    for _ in range(repeats):
        executor = Measured(program.sdg, program.ast, program.backend, bounds,
                            keep={n for n, _ in program.fetch}, stores=stores, watch=watch)
        start = time.perf_counter()
        executor.run()
        times.append(time.perf_counter() - start)
    store = executor.stores[watch]
    (n, out), = program.fetch
    result = [v for _, v in sorted(executor.stores[(n, out)].items())][-1]
    return {"store": store.kind, "seconds": min(times), "all_seconds": times,
            "us_per_step": min(times) / steps * 1e6, "bytes_held": max(executor.peak, store.nbytes()),
            "result": np.asarray(result).tolist()}


def run(args) -> dict:
    rows = []
    causal, k = causal_program(max(args.causal), args.width)
    for bound in args.causal:
        for stores in ("auto", "point"):
            if stores == "point" and bound > args.point_causal_max:
                continue
            rows.append({"program": "causal", "T": bound, "stores_option": stores,
                         **measure(causal, k, {"T": bound}, stores, args.repeats, bound)})
            print(_line(rows[-1]), flush=True)
    window, h = window_program(args.window_width, args.width)
    for bound in args.window:
        for stores in ("auto", "point"):
            rows.append({"program": "window", "T": bound, "stores_option": stores,
                         **measure(window, h, {"I": args.iterations, "T": bound}, stores, args.repeats,
                                   (args.iterations - 1) * bound)})
            print(_line(rows[-1]), flush=True)
    for program in ("causal", "window"):  # both stores compute the same values
        for bound in {r["T"] for r in rows if r["program"] == program}:
            same = [r["result"] for r in rows if r["program"] == program and r["T"] == bound]
            assert all(np.array_equal(same[0], r) for r in same), (program, bound)
    return {"rows": rows, "config": vars(args), "machine": _machine()}


def _line(row: dict) -> str:
    return (f"| {row['program']} | {row['T']:>7} | {row['stores_option']:>5} | {row['store']:>6} | "
            f"{row['us_per_step']:>9.1f} | {row['seconds']:>7.2f} | {row['bytes_held']:>11,} |")


def _machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(), "commit": commit}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--causal", type=int, nargs="+", default=[1000, 3000, 10000], help="bounds T of the causal program")
    parser.add_argument("--point-causal-max", type=int, default=3000,
                        help="run the causal program with point stores up to this T (their stacking is quadratic)")
    parser.add_argument("--window", type=int, nargs="+", default=[1000, 10000, 100000], help="bounds T of the window program")
    parser.add_argument("--window-width", type=int, default=64, help="W, the points each window reads")
    parser.add_argument("--iterations", type=int, default=2,
                        help="iterations I of the window program (the last one's episode is read by nothing, "
                             "so it does not run)")
    parser.add_argument("--width", type=int, default=32, help="the spatial size of k and h")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each row; the fastest is reported")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "stores.json"))
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error("--iterations must be at least 2: the last iteration's episode does not run")
    print("| program | T | stores | store | us/step | run s | bytes held |")
    print("|---|---|---|---|---|---|---|")
    report = run(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
