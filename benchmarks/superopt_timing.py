"""A/A test of the superopt benchmark's timing: one graph timed under several names.

Greedy's result for a workload is timed four times per round, under the
names ``input`` (the unoptimised graph, as company), ``eq``, ``A`` and ``B``
(one graph, three names, each compiled on its own), for ``--pairs``
sessions of ``--rounds`` rounds. Any win or loss between ``eq``, ``A`` and
``B`` is a false one. Three ways of timing are compared:

- ``rotating``: a fixed cyclic order, shifted by one every round (the
  benchmark's order until the tenth session);
- ``random``: a fresh random order every round
  (:func:`tempo.superopt.execute.time_interleaved`, the order now);
- ``random, N compiles``: the same, with every graph compiled ``--compiles``
  times and the compiles taken in turn, round by round (where a compile's
  weights lie moves its speed by about 1%; fifteenth session);

and two intervals for the median of the per-round ratios:

- ``bootstrap``: percentile bootstrap, 4000 resamples (the rule until the
  tenth session);
- ``order statistics``: :func:`tempo.superopt.stats.median_interval` (now).

    .venv/bin/python benchmarks/superopt_timing.py                  # squeezenet, ~6 minutes
    .venv/bin/python benchmarks/superopt_timing.py --workload bert --pairs 20
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

from tempo.files import write_bytes_atomic
from tempo.superopt.execute import compile_graph, time_interleaved
from tempo.superopt.latency import Latency, time_runs
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.reference import random_feeds
from tempo.superopt.rules import load_rules
from tempo.superopt.search import greedy
from tempo.superopt.stats import median_interval, round_medians

PAIRS = (("A", "B"), ("eq", "A"), ("eq", "B"))


def rotating(graphs: dict, rounds: int) -> dict[str, Latency]:
    """The old order: the graphs' cyclic order shifted by one every round."""
    fns = {k: compile_graph(g) for k, g in graphs.items()}
    feeds = random_feeds(next(iter(graphs.values())), 0)
    keys, samples = list(fns), {k: [] for k in fns}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            samples[k].extend(time_runs(lambda: fns[k](feeds), 1, 10).samples_ms)
    return {k: Latency(tuple(v)) for k, v in samples.items()}


def bootstrap_interval(ratios: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """The old interval: percentile bootstrap of the median, 4000 resamples."""
    picks = np.random.default_rng(seed).integers(0, len(ratios), size=(4000, len(ratios)))
    low, high = np.percentile(np.median(ratios[picks], axis=1), [2.5, 97.5])
    return float(low), float(high)


INTERVALS = {"bootstrap": bootstrap_interval, "order statistics": median_interval}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="squeezenet", choices=list(WORKLOADS))
    p.add_argument("--pairs", type=int, default=10, help="timing sessions per order")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--compiles", type=int, default=8,
                   help="compiles per graph taken in turn, in the third way of timing")
    p.add_argument("--out", default="benchmarks/results/superopt_timing.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    graph = build(args.workload, scale="small")
    same = greedy(graph, load_rules(), 30.0).graph
    graphs = {"input": graph, "eq": same, "A": same, "B": same}
    orders = {"rotating": lambda s: rotating(graphs, args.rounds),
              "random": lambda s: time_interleaved(graphs, rounds=args.rounds, seed=s),
              f"random, {args.compiles} compiles": lambda s: time_interleaved(
                  graphs, rounds=args.rounds, seed=s, compiles=args.compiles)}
    report = {"workload": args.workload, "pairs": args.pairs, "rounds": args.rounds, "orders": {}}
    for order, timed in orders.items():
        ratios = []
        for session in range(args.pairs):
            lat = timed(session)
            ratios += [round_medians(lat[a], args.rounds) / round_medians(lat[b], args.rounds)
                       for a, b in PAIRS]
        medians = [float(np.median(r)) for r in ratios]
        false = {name: sum(not lo <= 1.0 <= hi for lo, hi in map(interval, ratios))
                 for name, interval in INTERVALS.items()}
        report["orders"][order] = {"median_ratios": medians, "false_verdicts": false,
                                   "above_one": sum(m > 1.0 for m in medians)}
        print(f"{order}: done", file=sys.stderr)
    lines = ["| timing | identical pairs | median ratio > 1 | mean median ratio | "
             + " | ".join(f"false win/loss, {name}" for name in INTERVALS) + " |",
             "|---|---|---|---|" + "---|" * len(INTERVALS)]
    for order, r in report["orders"].items():
        lines.append(f"| {order} | {len(r['median_ratios'])} | {r['above_one']} | "
                     f"{np.mean(r['median_ratios']):.4f} | "
                     + " | ".join(str(r["false_verdicts"][name]) for name in INTERVALS) + " |")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_bytes_atomic(args.out, json.dumps(report, indent=1).encode())
    print("\n".join(lines))
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
