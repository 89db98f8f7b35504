"""Where the light resnet50's time goes, before and after greedy's rewrite, on torch (one thread).

Imports ``light/resnet50`` from the installed onnx package's backend test data, runs greedy's
search on its region (the cost model only, ``--search-s`` seconds), then times the region and
the result in interleaved rounds (the never-slower check's paired ratio, ``--rounds`` rounds
instead of the budget's) and each op type's share of one run. Prints a table and writes JSON:

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


def main() -> None:
    args = _args()
    torch.set_num_threads(1)
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    case = _light_case(root / f"light_{args.model}.onnx")
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
        "search": search, "timing": timing, "rounds": rounds,
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
