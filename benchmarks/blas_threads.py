"""The demo's time against NumPy's BLAS thread count: ``tempo run --threads 1`` against 2.

Runs ``tempo run --threads N examples/reinforce.py`` (the ``make demo``
program) as a fresh process for each thread count, alternating the counts
over the repeats so background load hits both alike, and reports the wall
time and the process's CPU time (user + system of the child). Tempo's
kernels on CartPole are small (32-wide layers), so extra BLAS threads spin
and contend rather than help; on a shared machine the gap widens. Prints a
table and writes JSON.

    .venv/bin/python benchmarks/blas_threads.py --iterations 20
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

from tempo.files import write_json_atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "reinforce.py")


def run_demo(threads: int, iterations: int) -> dict:
    """One ``tempo run`` of the demo: wall and CPU seconds, and its summary line's values."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "tempo", "run", "--threads", str(threads), DEMO,
                          "--iterations", str(iterations)], capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = re.search(r"mean_return_last5=([\d.]+) iterations=(\d+)", out.stdout)
    return {"threads": threads, "wall_s": wall, "cpu_s": cpu, "mean_return_last5": float(summary.group(1))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100, help="demo iterations (make demo: 100)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", default="1,2", help="thread counts to compare")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "blas_threads.json"))
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")]
    runs = [run_demo(n, args.iterations) for _ in range(args.repeats) for n in counts]
    rows = []
    print(f"{'BLAS threads':>12} {'wall s (median)':>16} {'CPU s (median)':>15} {'mean_return_last5':>18}")
    for n in counts:
        mine = [r for r in runs if r["threads"] == n]
        row = {"threads": n, "wall_s": statistics.median(r["wall_s"] for r in mine),
               "cpu_s": statistics.median(r["cpu_s"] for r in mine), "runs": mine}
        rows.append(row)
        print(f"{n:>12} {row['wall_s']:>16.1f} {row['cpu_s']:>15.1f} {mine[-1]['mean_return_last5']:>18.1f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out, {"iterations": args.iterations, "cpus": os.cpu_count(),
                                 "load_average": os.getloadavg(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
