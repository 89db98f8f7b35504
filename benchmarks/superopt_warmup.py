"""Does the timing favour a graph for its place among the graphs timed? (an A/A test)

One workload's graph is timed under six names (``k0`` to ``k5``, each compiled
on its own, ``--compiles`` compiles taken in turn) in ``--sessions`` sessions
of ``--rounds`` rounds, as the benchmark's final timing does
(:func:`tempo.superopt.execute.time_interleaved`). Two numbers per name
position:

- the first timed run of each round over its round's median: a round runs
  every name once untimed before its timed cycles, and until the
  twenty-fifth session it did so in the names' order, so the name warmed up
  last went into the first cycle with its data freshest in cache;
- how often the last name came out faster (median of the per-round paired
  ratios above 1) than each earlier one: any excess over half is a bias.
  The five comparisons of a session share the last name, so they are not
  independent draws.

The benchmark's A/A control (greedy's graph timed again under the last name)
came out faster than greedy in 170 of its 281 runs until then.

    .venv/bin/python benchmarks/superopt_warmup.py                    # bert and decoder, ~4 minutes
    .venv/bin/python benchmarks/superopt_warmup.py --workloads squeezenet --sessions 10
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
from tqdm import tqdm

from tempo.files import write_json_atomic
from tempo.superopt.execute import time_interleaved
from tempo.superopt.models import SCALES, WORKLOADS, build

NAMES = tuple(f"k{i}" for i in range(6))
REPEATS = 10        # time_interleaved's default cycles per round


def measure(name: str, args: argparse.Namespace) -> dict:
    """The first run's excess by name position, and the last name's wins over the others."""
    graph = build(name, scale=args.scale)
    first_over_median, last_faster = [], 0
    for session in tqdm(range(args.sessions), desc=name, unit="session", leave=False):
        lat = time_interleaved({k: graph for k in NAMES}, rounds=args.rounds, compiles=args.compiles,
                               seed=session, repeats=REPEATS)
        x = np.array([lat[k].samples_ms for k in NAMES]).reshape(len(NAMES), args.rounds, REPEATS)
        first_over_median.append(np.mean(x[:, :, 0] / np.median(x, axis=2), axis=1))
        per_round = np.median(x[:-1] / x[-1:], axis=2)          # earlier name over the last
        last_faster += int(np.sum(np.median(per_round, axis=1) > 1.0))
    return {"first_over_median": np.mean(first_over_median, axis=0).tolist(),
            "last_faster": last_faster, "comparisons": args.sessions * (len(NAMES) - 1)}


def table(report: dict) -> str:
    """The report as a Markdown table."""
    lines = ["| workload | first run / round median, k0 ... k5 | last name faster |", "|---|---|---|"]
    for name, r in report.items():
        firsts = " ".join(f"{v:.3f}" for v in r["first_over_median"])
        lines.append(f"| {name} | {firsts} | {r['last_faster']}/{r['comparisons']} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=["bert", "decoder"], choices=list(WORKLOADS))
    p.add_argument("--scale", default="small", choices=SCALES, help="the workloads' sizes")
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--compiles", type=int, default=8, help="compiles per name taken in turn")
    p.add_argument("--out", default="benchmarks/results/superopt_warmup.json")
    args = p.parse_args()
    for name in ("sessions", "rounds", "compiles"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    report = {w: measure(w, args) for w in tqdm(args.workloads, desc="workloads", unit="graph")}
    print(table(report))
    write_json_atomic(args.out, {"scale": args.scale, "sessions": args.sessions,
                                 "rounds": args.rounds, "compiles": args.compiles,
                                 "workloads": report})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
