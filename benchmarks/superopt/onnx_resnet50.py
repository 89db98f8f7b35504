"""Where the light resnet50's time goes, before and after greedy's rewrite, on torch (one thread).

First runs what ``tempo superopt --agent greedy`` runs on ``light/resnet50`` (from the installed
onnx package's backend test data) at each of ``--budgets``: whether it rewrote the model, the
speed-up its never-slower check measured, and in how many rounds. Then runs greedy's search on
the region alone (the cost model only, ``--search-s`` seconds), times the region and the
result in interleaved rounds (the check's paired ratio, ``--rounds`` rounds whatever they
take) and each op type's share of one run, with the search's own wall and process-CPU time.
Prints a table and writes JSON:

    python benchmarks/superopt/onnx_resnet50.py --out docs/results/superopt/onnx_resnet50.json
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import torch

from tempo.files import write_json_atomic
from tempo.superopt.fold import fold_constants
from tempo.superopt.graph import run_plan
from tempo.superopt.onnx_conformance import _light_case
from tempo.superopt.onnx_import import import_model
from tempo.superopt.onnx_optimize import optimize_model, warm_up
from tempo.superopt.optimize import compare_latency
from tempo.superopt.reference import random_feeds
from tempo.superopt.rules import load_rules
from tempo.superopt.search import greedy
from tempo.superopt.torch_backend import KERNELS


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", help="a light model's name")
    p.add_argument("--search-s", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--budgets", type=float, nargs="*", default=[30.0, 60.0, 120.0],
                   help="budgets to run the whole command's optimisation at")
    p.add_argument("--out", default="benchmarks/results/superopt/onnx_resnet50.json")
    return p.parse_args()


def op_times(graph, runs: int = 5) -> dict[str, float]:
    """Milliseconds per run spent in each op type's kernels (the median of ``runs`` runs after
    one warm-up run)."""
    plan = run_plan(fold_constants(graph), KERNELS, torch.tensor)
    op_of = {id(fn): op for op, fn in KERNELS.items()}
    feeds = random_feeds(graph, 0)
    totals: dict[str, list] = defaultdict(list)
    for k in range(runs + 1):
        values = list(plan.values)
        for index, name in plan.inputs:
            values[index] = torch.tensor(feeds[name])
        spent: dict[str, float] = defaultdict(float)
        with torch.inference_mode():
            for kernel, attrs, args, out in plan.steps:
                start = time.perf_counter()
                values[out] = kernel(attrs, *(values[i] for i in args))
                spent[op_of[id(kernel)]] += (time.perf_counter() - start) * 1e3
        for op, ms in spent.items():
            if k:
                totals[op].append(ms)
    return {op: float(np.median(ms)) for op, ms in sorted(totals.items())}


def by_budget(case, budgets: list[float]) -> dict[str, dict]:
    """What greedy's optimisation of the whole model did at each budget."""
    warm_up("greedy")
    found = {}
    for budget in budgets:
        start, cpu = time.perf_counter(), time.process_time()
        result = optimize_model(case.model, "greedy", budget, feeds=dict(case.inputs))
        found[f"{budget:g}"] = {
            "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
            "load": os.getloadavg()[0], "rewritten": result.rewritten,
            "speedup": result.outcome.speedup if result.rewritten else None,
            "reason": result.reason or (result.outcome.reason if result.outcome else "")}
        row = found[f"{budget:g}"]
        speed = f"{row['speedup']:.3f}x" if row["rewritten"] else "kept"
        print(f"budget {budget:g} s: {speed} in {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU "
              f"(load {row['load']:.1f}) {row['reason']}", flush=True)
    return found


def main() -> None:
    args = _args()
    torch.set_num_threads(1)
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    case = _light_case(root / f"light_{args.model}.onnx")
    budgets = by_budget(case, args.budgets)
    region = import_model(case.model).graph
    start, cpu = time.perf_counter(), time.process_time()
    found = greedy(region, load_rules(), args.search_s)
    search = {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    start, cpu = time.perf_counter(), time.process_time()
    before_ms, speedup, rounds = compare_latency(region, found.graph, rounds=args.rounds)
    timing = {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    result = {
        "model": args.model, "load": os.getloadavg()[0], "torch_threads": 1,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "ops_before": region.op_counts(), "ops_after": found.graph.op_counts(),
        "rules": {r: found.applied.count(r) for r in sorted(set(found.applied))},
        "by_budget": budgets, "search": search, "timing": timing, "rounds": rounds,
        "median_ms_before": before_ms, "speedup": speedup,
        "op_ms_before": op_times(region), "op_ms_after": op_times(found.graph),
    }
    print(f"{args.model}: {sum(result['ops_before'].values())} -> {sum(result['ops_after'].values())} "
          f"graph nodes, rules {result['rules']}")
    print(f"median {before_ms:.1f} ms before, speed-up {speedup:.3f} over {rounds} rounds "
          f"(timing {timing['wall_s']:.0f} s wall, {timing['cpu_s']:.0f} s CPU; load {result['load']:.1f})")
    print("| op | ms before | ms after |\n|---|---|---|")
    for op in sorted(set(result["op_ms_before"]) | set(result["op_ms_after"])):
        print(f"| {op} | {result['op_ms_before'].get(op, 0):.1f} | {result['op_ms_after'].get(op, 0):.1f} |")
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
