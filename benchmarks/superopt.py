"""X-RLflow benchmark: speed-ups of greedy, backtracking, equality saturation and RL per workload.

For each workload the unoptimised graph and every method's result are timed
in one interleaved session (torch backend, one thread, median of repeats), so
the speed-ups share the same noise. Also: each method's optimisation time,
the Fig. 7 run (an agent trained on one input shape, evaluated on three
others) and the Fig. 5 heatmap of the rules the RL agent applied.

    .venv/bin/python benchmarks/superopt.py --quick        # small shapes, ~4 minutes
    .venv/bin/python benchmarks/superopt.py                # full published shapes (hours on CPU)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch

from tempo.superopt.agent import PPOConfig, optimize_with_agent
from tempo.superopt.execute import compile_graph
from tempo.superopt.graph import Graph
from tempo.superopt.latency import time_runs
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.optimize import optimize, same_outputs
from tempo.superopt.reference import random_feeds
from tempo.superopt.rules import load_rules

METHODS = ("greedy", "backtrack", "eqsat", "rl")


@dataclass
class Args:
    """Benchmark settings."""

    quick: bool          # small shapes and short budgets
    workloads: list[str]  # which workloads to run
    search_s: float      # budget of the backtracking search per workload
    train_s: float       # RL training budget per workload
    out: str             # JSON output path


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes and short budgets")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--search-s", type=float, default=None, help="backtracking budget (s)")
    p.add_argument("--train-s", type=float, default=None, help="RL training budget (s)")
    p.add_argument("--out", default="benchmarks/results/superopt.json")
    ns = p.parse_args()
    return Args(ns.quick, ns.workloads, ns.search_s or (5.0 if ns.quick else 60.0),
                ns.train_s or (15.0 if ns.quick else 600.0), ns.out)


def interleaved(graphs: dict[str, Graph], rounds: int, repeats: int = 10
                ) -> dict[str, tuple[float, float]]:
    """(median, interquartile range) of each graph's latency in ms, timed in alternating rounds.

    The order of the graphs rotates every round, so no graph always runs first or last.
    """
    fns = {k: compile_graph(g) for k, g in graphs.items()}
    feeds = random_feeds(next(iter(graphs.values())))
    samples: dict[str, list[float]] = {k: [] for k in graphs}
    keys = list(fns)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            samples[k].extend(time_runs(lambda: fns[k](feeds), 1, repeats).samples_ms)
    return {k: (float(np.median(v)), float(np.subtract(*np.percentile(v, [75, 25]))))
            for k, v in samples.items()}


def run_workload(name: str, args: Args, rules) -> dict:
    graph = build(name, small=args.quick)
    budgets = {"greedy": args.search_s, "backtrack": args.search_s, "eqsat": args.search_s,
               "rl": args.train_s}
    results, graphs = {}, {"input": graph}
    for method in METHODS:
        options = {"progress": False} if method == "rl" else {}
        out = optimize(graph, method, budgets[method], rules, **options)
        assert same_outputs(graph, out.graph), f"{method} changed {name}'s outputs"
        graphs[method] = out.graph
        results[method] = {"optimise_s": out.optimise_s, "applied": out.applied,
                           "kept_input": out.kept_input}
    latency = interleaved(graphs, rounds=15 if args.quick else 30)
    for method in METHODS:
        results[method]["latency_ms"], results[method]["iqr_ms"] = latency[method]
        results[method]["speedup"] = latency["input"][0] / latency[method][0]
    return {"input_ms": latency["input"][0], "input_iqr_ms": latency["input"][1],
            "nodes": len(graph.topo()), "methods": results}


def generalisation(args: Args, rules, name: str = "bert") -> list[dict]:
    """Fig. 7: train on the default shape, evaluate the saved agent on three other shapes."""
    config = PPOConfig()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "agent.pt")
        optimize_with_agent(build(name, small=args.quick), rules, args.train_s, save=path,
                            config=config, progress=False)
        rows = []
        for shape in WORKLOADS[name].shapes:
            g = build(name, small=args.quick, **shape)
            res = optimize_with_agent(g, rules, 1.0, load=path)
            lat = interleaved({"input": g, "agent": res.graph}, rounds=6)
            rows.append({"shape": shape, "speedup": lat["input"][0] / lat["agent"][0],
                         "applied": len(res.applied)})
    return rows


def heatmap(report: dict, path: str) -> None:
    """Fig. 5: how often the RL agent applied each rule, per workload (rules applied at least once)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["workloads"])
    counts: dict[str, dict[str, int]] = {}
    for w in names:
        for rule in report["workloads"][w]["methods"]["rl"]["applied"]:
            counts.setdefault(rule, {}).setdefault(w, 0)
            counts[rule][w] += 1
    rules = sorted(counts)
    grid = np.array([[counts[r].get(w, 0) for r in rules] for w in names]) if rules else np.zeros((len(names), 1))
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(rules) + 2), 0.5 * len(names) + 2))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(rules)), rules, rotation=70, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names)
    for (i, j), v in np.ndenumerate(grid):
        if v:
            ax.text(j, i, str(v), ha="center", va="center", color="w", fontsize=7)
    fig.colorbar(im, ax=ax, label="applications")
    ax.set_title("Rewrite rules applied by the RL agent")
    fig.tight_layout()
    _atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=120), binary=True)
    plt.close(fig)


def _atomic(path: str, write, binary: bool = False) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb" if binary else "w") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def table(report: dict) -> str:
    """Speed-ups with each method's latency IQR as a fraction of its median (the noise)."""
    head = (f"| workload | nodes | input ms (IQR %) | " + " | ".join(f"{m} x (IQR %)" for m in METHODS)
            + " | " + " | ".join(f"{m} s" for m in METHODS) + " |")
    lines = [head, "|" + "---|" * (3 + 2 * len(METHODS))]
    for w, r in report["workloads"].items():
        ms = r["methods"]
        noise = {m: 100 * ms[m]["iqr_ms"] / ms[m]["latency_ms"] for m in METHODS}
        lines.append(f"| {w} | {r['nodes']} | {r['input_ms']:.3f} "
                     f"({100 * r['input_iqr_ms'] / r['input_ms']:.0f}) | "
                     + " | ".join(f"{ms[m]['speedup']:.3f} ({noise[m]:.0f})" for m in METHODS) + " | "
                     + " | ".join(f"{ms[m]['optimise_s']:.1f}" for m in METHODS) + " |")
    lines.append("")
    lines.append("| Fig. 7 (bert agent, other shapes) | speed-up | rewrites |")
    lines.append("|---|---|---|")
    for row in report["generalisation"]:
        lines.append(f"| {row['shape']} | {row['speedup']:.3f} | {row['applied']} |")
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    rules = load_rules()
    start = time.perf_counter()
    report = {"quick": args.quick, "device": "cpu, torch, 1 thread", "workloads": {}}
    for name in args.workloads:
        print(f"[{time.perf_counter() - start:6.1f}s] {name}", file=sys.stderr)
        report["workloads"][name] = run_workload(name, args, rules)
    print(f"[{time.perf_counter() - start:6.1f}s] generalisation", file=sys.stderr)
    report["generalisation"] = generalisation(args, rules)
    report["seconds"] = time.perf_counter() - start
    _atomic(args.out, lambda fh: json.dump(report, fh, indent=1))
    heatmap(report, os.path.join(os.path.dirname(args.out), "superopt_rules.png"))
    print(table(report))
    print(f"\n{report['seconds']:.0f} s; JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
