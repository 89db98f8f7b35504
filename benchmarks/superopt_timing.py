"""A/A test of the superopt benchmark's timing: one graph timed under several names.

Greedy's result for a workload is timed four times per round, under the
names ``input`` (the unoptimised graph, as company), ``eq``, ``A`` and ``B``
(one graph, three names, each compiled on its own), for ``--pairs``
sessions of ``--rounds`` rounds, every graph compiled ``--compiles`` times
and the compiles taken in turn. Any win or loss between ``eq``, ``A`` and
``B`` is a false one, and the width of a verdict's interval is what the
timing can resolve. Two ways of timing, their sessions alternating so that
both meet the machine's slow and fast phases alike:

- ``blocks``: each round runs one graph's repeats, then the next graph's, in a
  fresh random order, and a round's ratio is that of the two graphs' medians
  (the timing until the twenty-second session);
- ``cycles``: each round runs ``repeats`` cycles, each calling every graph
  once in a fresh random order, and a round's ratio is the median of its
  cycles' paired ratios (:func:`tempo.superopt.stats.round_ratios`, now).

Each pair's verdict interval (:func:`tempo.superopt.stats.median_interval`)
is taken per round and per compile pair, as the benchmark does.

    .venv/bin/python benchmarks/superopt_timing.py                  # squeezenet, ~3 minutes
    .venv/bin/python benchmarks/superopt_timing.py --workload bert --pairs 20
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
from tqdm import tqdm

from tempo.files import write_bytes_atomic
from tempo.superopt.execute import time_interleaved
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.rules import load_rules
from tempo.superopt.search import greedy
from tempo.superopt.stats import compile_pair_medians, median_interval, round_medians, round_ratios

PAIRS = (("A", "B"), ("eq", "A"), ("eq", "B"))
WAYS = {"blocks": lambda lat, a, b, rounds: round_medians(lat[a], rounds) / round_medians(lat[b], rounds),
        "cycles": lambda lat, a, b, rounds: round_ratios(lat[a], lat[b], rounds)}


def summary(ratios: list[np.ndarray], compiles: int) -> dict:
    """How a way of timing did over its identical pairs' per-round ratios."""
    per_pair = [compile_pair_medians(r, compiles) for r in ratios]
    medians = [float(np.median(r)) for r in ratios]
    out = {"median_ratios": medians, "above_one": sum(m > 1.0 for m in medians),
           "round_ratio_iqr": float(np.median([np.subtract(*np.percentile(r, [75, 25]))
                                               for r in ratios]))}
    for unit, values in (("round", ratios), ("compile pair", per_pair)):
        intervals = [median_interval(v) for v in values]
        out[f"false_verdicts per {unit}"] = sum(not lo <= 1.0 <= hi for lo, hi in intervals)
        out[f"interval_width per {unit}"] = float(np.median([hi - lo for lo, hi in intervals]))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="squeezenet", choices=list(WORKLOADS))
    p.add_argument("--pairs", type=int, default=10, help="timing sessions per way of timing")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--compiles", type=int, default=8, help="compiles per graph taken in turn")
    p.add_argument("--out", default="benchmarks/results/superopt_timing.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    graph = build(args.workload, scale="small")
    same = greedy(graph, load_rules(), 30.0).graph
    graphs = {"input": graph, "eq": same, "A": same, "B": same}
    ratios: dict[str, list[np.ndarray]] = {way: [] for way in WAYS}
    for session in tqdm(range(args.pairs), desc="sessions", unit="session"):
        for way, ratio in WAYS.items():
            lat = time_interleaved(graphs, rounds=args.rounds, seed=session,
                                   compiles=args.compiles,
                                   interleave="rounds" if way == "blocks" else "calls")
            ratios[way] += [ratio(lat, a, b, args.rounds) for a, b in PAIRS]
    report = {"workload": args.workload, "pairs": args.pairs, "rounds": args.rounds,
              "compiles": args.compiles,
              "ways": {way: summary(r, args.compiles) for way, r in ratios.items()}}
    lines = ["| timing | identical pairs | median ratio > 1 | IQR of per-round ratios | "
             "interval width, per round | per compile pair | false win/loss, per round | "
             "per compile pair |", "|---|---|---|---|---|---|---|---|"]
    for way, r in report["ways"].items():
        lines.append(f"| {way} | {len(r['median_ratios'])} | {r['above_one']} | "
                     f"{r['round_ratio_iqr']:.4f} | {r['interval_width per round']:.4f} | "
                     f"{r['interval_width per compile pair']:.4f} | "
                     f"{r['false_verdicts per round']} | {r['false_verdicts per compile pair']} |")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_bytes_atomic(args.out, json.dumps(report, indent=1).encode())
    print("\n".join(lines))
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
