"""How far TASO's cost model is from end-to-end latency (X-RLflow Table 1), per backend.

For each workload and backend: the cost model's estimate of the unoptimised
graph (the sum of its operators' latencies, each timed on its own) beside
its measured end-to-end latency, and, for greedy's result under that
backend's own cost model, the speed-up the model predicts beside the one
measured (input and result timed cycle by cycle, ``--compiles`` compiles
of each taken in turn; the median paired ratio with its distribution-free
95% interval, :func:`tempo.superopt.stats.paired_verdict`).

On ``torch`` every operator is a framework call, so the model's sum is
close to what a graph costs and its rankings are mostly right. On ``jax``
the whole graph is one XLA program, which fuses element-wise operators
into their neighbours and runs without per-operator dispatch: the model's
estimate is several times the graph's latency, and the rewrites it
predicts as gains are those XLA already makes (X-RLflow's argument for
rewarding measured latency: optimisation in the lower IR layers is
invisible to a per-operator model).

    .venv/bin/python benchmarks/superopt/costmodel.py                      # torch and jax, ~6 minutes
    .venv/bin/python benchmarks/superopt/costmodel.py --backends jax --workloads squeezenet
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from tqdm import tqdm

from tempo.files import write_json_atomic
from tempo.superopt.costmodel import CostModel
from tempo.superopt.execute import BACKENDS, time_interleaved
from tempo.superopt.models import SCALES, WORKLOADS, build
from tempo.superopt.rules import load_rules
from tempo.superopt.search import greedy
from tempo.superopt.stats import paired_verdict


def measure(name: str, backend: str, args: argparse.Namespace, rules) -> dict:
    """The cost model against measured latency for one workload on one backend."""
    graph = build(name, scale=args.scale)
    model = CostModel(backend=backend)
    estimate = model.cost(graph)
    result = greedy(graph, rules, args.search_s, model)
    lat = time_interleaved({"input": graph, "greedy": result.graph}, rounds=args.rounds,
                           backend=backend, compiles=args.compiles)
    e2e = lat["input"].median_ms
    verdict = paired_verdict(lat["input"], lat["greedy"], args.rounds, args.compiles)
    return {"cost_model_ms": estimate, "e2e_ms": e2e, "diff_pct": 100.0 * (estimate - e2e) / e2e,
            "greedy_rewrites": len(result.applied),
            "predicted_speedup": estimate / result.cost,
            "measured": verdict.record()}


def table(rows: list[dict]) -> str:
    """The report as a Markdown table."""
    lines = ["| workload | backend | cost model ms | end-to-end ms | diff | greedy rewrites "
             "| predicted speed-up | measured speed-up [95% CI] |", "|" + "---|" * 8]
    for r in rows:
        lo, hi = r["measured"]["ci95"]
        lines.append(f"| {r['workload']} | {r['backend']} | {r['cost_model_ms']:.3f} | {r['e2e_ms']:.3f} "
                     f"| {r['diff_pct']:+.0f}% | {r['greedy_rewrites']} | {r['predicted_speedup']:.3f} "
                     f"| {r['measured']['ratio']:.3f} [{lo:.3f}, {hi:.3f}] |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--backends", nargs="+", default=["torch", "jax"], choices=list(BACKENDS))
    p.add_argument("--scale", default="small", choices=SCALES, help="the workloads' sizes")
    p.add_argument("--search-s", type=float, default=60.0, help="greedy's budget (s)")
    p.add_argument("--rounds", type=int, default=16, help="interleaved timing rounds")
    p.add_argument("--compiles", type=int, default=8, help="compiles per graph taken in turn")
    p.add_argument("--out", default="benchmarks/results/superopt/costmodel.json")
    args = p.parse_args()
    for name in ("rounds", "compiles"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rules = load_rules()
    jobs = [(w, b) for w in args.workloads for b in args.backends]
    rows = [{"workload": w, "backend": b, **measure(w, b, args, rules)}
            for w, b in tqdm(jobs, desc="workloads", unit="run")]
    print(table(rows))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out, {"scale": args.scale, "rounds": args.rounds,
                                 "compiles": args.compiles, "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
