"""The executor's dispatch overhead: microseconds per launched operation.

A recurrence of scalar ops over ``t`` (``s[t + 1] = tanh(s[t] * 0.5) + 1``,
islands left unfused so each op is its own launch) does almost no work per
kernel, so its time per launch is the executor's own cost: evaluating the
point and the input indices, reading and writing the tensor stores,
deallocating, and calling the kernel. Reported as wall and process CPU
microseconds per launch (the CPU time is the steadier one on a shared
machine). Prints a table and writes JSON.

    .venv/bin/python benchmarks/dispatch.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import tempo as tpo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(steps: int, repeats: int) -> dict:
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 0.0, "float32")
        s[t + 1] = (s[t] * 0.5).tanh() + 1.0
        program = ctx.compile([s], passes={"fuse": False})
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        program.run({T: steps})
        wall.append((time.perf_counter() - start) / program.ledger.launches * 1e6)
        cpu.append((time.process_time() - start_cpu) / program.ledger.launches * 1e6)
    return {"steps": steps, "launches": program.ledger.launches, "us_per_launch": statistics.median(wall),
            "cpu_us_per_launch": statistics.median(cpu), "us_per_launch_all": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "dispatch.json"))
    args = parser.parse_args()
    result = measure(args.steps, args.repeats)
    print(f"{'steps':>8} {'launches':>9} {'us/launch (median)':>19} {'CPU us/launch':>14}")
    print(f"{result['steps']:>8} {result['launches']:>9} {result['us_per_launch']:>19.2f} "
          f"{result['cpu_us_per_launch']:>14.2f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
