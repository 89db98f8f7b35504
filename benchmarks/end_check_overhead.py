"""What checking a ``tpo.end_when`` flag costs per step, against a loop that knows its length.

The program is a decode-like recurrence, ``h[t + 1] = tanh(h[t] @ W)`` (a batch
of ``--batch`` rows of ``--hidden``), that runs ``--length`` steps:

- ``fixed``: no flag, the run's bound ``T`` is the length (decoding without
  any check);
- ``k=1``, ``k=8``: ``tpo.end_when((eval_symbol(t) >= length - 1) | isnan(h[t].sum()))``
  with the cap ``4 * length``, the flag read on the host every step / every 8
  steps (``Config(end_check_every=k)``); the flag reads ``h[t]``, as an
  end-of-sequence flag reads the token, so the check runs in the loop over
  ``t`` (on JAX, a device loop: launches of ``k`` steps);
- ``auto``: the same, ``k`` chosen by the runtime (1 on a host backend).

Each program runs once to warm up (JIT compilation), then ``--repeats`` times;
the least wall and process-CPU seconds per step are reported, each mode's
overhead over ``fixed``, and the run's launches (kernels, device loops and
their chunks, end checks: ``program.ledger``). NumPy/BLAS, torch and XLA run at one thread.

    .venv/bin/python benchmarks/end_check_overhead.py --out docs/results/end_check_overhead
"""
from __future__ import annotations

import argparse
import os
import sys
import time

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PJRT_NPROC"):
    os.environ[_name] = "1"  # PJRT_NPROC: XLA's CPU client runs a program's operations on one thread
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"  # and no operation is split over threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import tempo as tpo  # noqa: E402
from tempo.files import write_json_atomic  # noqa: E402

MODES = {"fixed": None, "k=1": 1, "k=8": 8, "auto": None}


def build(mode: str, backend: str, length: int, batch: int, hidden: int):
    """The recurrence compiled for ``mode``, and the bounds it runs with."""
    rng = np.random.default_rng(0)
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        w = tpo.from_numpy((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32))
        h = tpo.placeholder((batch, hidden), "float32", dims=(t,))
        h[0] = tpo.from_numpy(rng.standard_normal((batch, hidden)).astype(np.float32))
        h[t + 1] = (h[t] @ w).tanh()
        if mode != "fixed":
            total = h[t].sum()
            tpo.end_when((tpo.eval_symbol(t) >= length - 1) | (total != total))
        config = tpo.Config(end_check_every=MODES[mode])
        program = ctx.compile(fetch=[h[T - 1]], backend=backend, config=config)
    return program, {"T": length if mode == "fixed" else 4 * length}


def measure(program, bounds: dict, repeats: int) -> tuple[float, float, np.ndarray]:
    """The least wall and CPU seconds of ``repeats`` runs (after one to warm up), and the last result."""
    (out,) = program.run(bounds)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        (out,) = program.run(bounds)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["numpy", "torch", "jax"])
    parser.add_argument("--length", type=int, default=200, help="steps the loop runs")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="end_check_overhead", help="writes <out>.json")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = []
    print(f"h[t + 1] = tanh(h[t] @ W), {args.batch}x{args.hidden}, {args.length} steps, one thread, "
          f"load {load:.1f}; least of {args.repeats} runs")
    print(f"{'backend':8} {'mode':6} {'k':>3} {'wall us/step':>13} {'cpu us/step':>12} {'overhead':>9} "
          f"{'launches':>8} {'reads':>5}")
    for backend in args.backends:
        fixed = None
        for mode in MODES:
            program, bounds = build(mode, backend, args.length, args.batch, args.hidden)
            wall, cpu, out = measure(program, bounds, args.repeats)
            fixed = fixed if fixed is not None else (cpu, out, wall)
            check = program.end_checks.get("T")
            row = {"backend": backend, "mode": mode, "every": check.every if check else None,
                   "steps": check.steps if check else args.length, "wall_us_per_step": 1e6 * wall / args.length,
                   "cpu_us_per_step": 1e6 * cpu / args.length, "cpu_overhead": cpu / fixed[0] - 1,
                   "wall_overhead": wall / fixed[2] - 1 if fixed[2] else 0.0,
                   "launches": program.ledger.launches, "flag_reads": check.reads if check else 0,
                   "same_result": bool(np.array_equal(out, fixed[1]))}
            rows.append(row)
            print(f"{backend:8} {mode:6} {row['every'] or '-':>3} {row['wall_us_per_step']:13.1f} "
                  f"{row['cpu_us_per_step']:12.1f} {100 * row['cpu_overhead']:8.1f}% {row['launches']:8d} "
                  f"{row['flag_reads']:5d}")
    write_json_atomic(args.out + ".json", {"settings": vars(args), "load_average": load, "rows": rows,
                                           "date": time.strftime("%Y-%m-%d")})
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
