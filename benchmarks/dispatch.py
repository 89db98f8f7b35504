"""The executor's dispatch overhead: microseconds per launched operation.

A recurrence of scalar ops over ``t`` (``s[t + 1] = tanh(s[t] * 0.5) + 1``,
islands left unfused so each op is its own launch) does almost no work per
kernel, so its time per launch is the executor's own cost: evaluating the
point and the input indices, reading and writing the tensor stores,
deallocating, and calling the kernel. Reported as wall and process CPU
microseconds per operation (the CPU time is the steadier one on a shared
machine): an operation is one launch of the statement-by-statement executor
(counted on NumPy), so on a backend that runs the loop as one device program
(JAX) it is the compiled loop's time per step's operation, and ``launches``
says how many launches it made. Prints a table and writes JSON.

    .venv/bin/python benchmarks/dispatch.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import tempo as tpo
from tempo.runtime.backends.base import get_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(steps: int, repeats: int) -> dict:
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 0.0, "float32")
        s[t + 1] = (s[t] * 0.5).tanh() + 1.0
        program = ctx.compile([s], passes={"fuse": False})
    backend = program.backend
    program.backend = get_backend("numpy")
    program.run({T: steps})
    operations = program.ledger.launches
    program.backend = backend
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        program.run({T: steps})
        wall.append((time.perf_counter() - start) / operations * 1e6)
        cpu.append((time.process_time() - start_cpu) / operations * 1e6)
    return {"steps": steps, "operations": operations, "launches": program.ledger.launches,
            "us_per_operation": statistics.median(wall), "cpu_us_per_operation": statistics.median(cpu),
            "us_per_operation_all": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "dispatch.json"))
    args = parser.parse_args()
    result = measure(args.steps, args.repeats)
    print(f"{'steps':>8} {'operations':>11} {'launches':>9} {'us/operation (median)':>22} {'CPU us/operation':>17}")
    print(f"{result['steps']:>8} {result['operations']:>11} {result['launches']:>9} "
          f"{result['us_per_operation']:>22.2f} {result['cpu_us_per_operation']:>17.2f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
