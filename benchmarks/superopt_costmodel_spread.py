"""How stable the cost model's per-operator costs are from one fresh model to the next.

The baselines rank rewrites by :class:`tempo.superopt.costmodel.CostModel`
and the agent's reward shaping uses it, so an operator whose cost moves 2x
between two fresh models of the same graph misleads both. For each workload
and each way of turning the operator's and the reference kernel's samples
into a ratio (``RATIOS``: the fastest runs', or the median of the
cycle-paired ratios), ``--models`` fresh models, alternating between the
ratios, price every operator of the graph; each operator's cost is taken as a
share of its model's total, and the table gives, over the operators, the
median and 90th percentile of the largest share over the smallest. A
512x512 matmul against a 16x16 one (32768 times the multiply-adds) checks
that the ranking of very different operators survives: the smallest ratio
over the models is reported.

``--busy N`` runs N pure-Python busy loops meanwhile, as the test suite's
two workers or a training run do on this 2-core machine. Operators are
timed on one torch thread, as :func:`tempo.superopt.optimize.optimize`
times them.

    .venv/bin/python benchmarks/superopt_costmodel_spread.py              # ~3 minutes
    .venv/bin/python benchmarks/superopt_costmodel_spread.py --busy 0
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys

import numpy as np
import torch
from tqdm import tqdm

from tempo.files import write_json_atomic
from tempo.superopt.costmodel import RATIOS, CostModel
from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.models import SCALES, WORKLOADS, build


def _spin() -> None:
    while True:
        pass


def _matmul(n: int):
    b = GraphBuilder(0)
    return b.build([node("matmul", b.input("x", (n, n)), b.weight((n, n)))])


def spread(name: str, models: int, scale: str) -> dict:
    """Per ratio: the spread of operator shares over fresh models and the big/small matmul ratio."""
    graph = build(name, scale=scale)
    ops = [n for n in graph.topo() if n.src and id(n) not in graph.constant_ids() and n.op != "opaque"]
    big, small = _matmul(512), _matmul(16)
    shares: dict[str, list] = {r: [] for r in RATIOS}
    big_over_small: dict[str, list] = {r: [] for r in RATIOS}
    for _ in range(models):
        for ratio in RATIOS:
            model = CostModel(ratio=ratio)
            costs = np.array([model.op_cost(n) for n in ops])
            shares[ratio].append(costs / costs.sum())
            big_over_small[ratio].append(model.cost(big) / model.cost(small))
    rows = {}
    for ratio in RATIOS:
        s = np.array(shares[ratio])
        max_over_min = s.max(axis=0) / s.min(axis=0)
        rows[ratio] = {"operators": len(ops), "median_max_over_min": float(np.median(max_over_min)),
                       "p90_max_over_min": float(np.percentile(max_over_min, 90)),
                       "big_over_small": [float(v) for v in big_over_small[ratio]]}
    return rows


def table(report: dict) -> str:
    """The report as a Markdown table."""
    lines = ["| workload | ratio | operators | median max/min | 90th percentile "
             "| smallest 512/16 matmul |", "|" + "---|" * 6]
    for name, rows in report.items():
        for ratio, r in rows.items():
            lines.append(f"| {name} | {ratio} | {r['operators']} | {r['median_max_over_min']:.2f} "
                         f"| {r['p90_max_over_min']:.2f} | {min(r['big_over_small']):.1f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=["squeezenet", "bert"], choices=list(WORKLOADS))
    p.add_argument("--scale", default="small", choices=SCALES, help="the workloads' sizes")
    p.add_argument("--models", type=int, default=6, help="fresh models of each ratio")
    p.add_argument("--busy", type=int, default=2, help="busy loops running meanwhile")
    p.add_argument("--out", default="benchmarks/results/superopt_costmodel_spread.json")
    args = p.parse_args()
    if args.models < 2 or args.busy < 0:
        p.error("--models must be at least 2 and --busy at least 0")
    torch.set_num_threads(1)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    try:
        report = {w: spread(w, args.models, args.scale)
                  for w in tqdm(args.workloads, desc="workloads", unit="graph")}
    finally:
        for s in spinners:
            s.terminate()
    print(table(report))
    write_json_atomic(args.out, {"scale": args.scale, "models": args.models, "busy": args.busy,
                                 "workloads": report})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
