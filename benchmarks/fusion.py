"""Fusion's effect on whole programs: the RL examples with and without the fuse pass,
and with the superoptimiser on their islands.

Each example (REINFORCE and PPO with CartPole written as tensor ops, A2C with
gymnasium's CartPole) trains for a few iterations in three variants: the
default pass pipeline (``fused``), the fuse pass left out (``unfused``), and
the superopt pass on the fused islands (``superopt``: TASO's greedy search
by default, operators timed at the run's batch and episode sizes), rotating
which goes first, ``--repeats`` times. Reported per program and variant: SDG
nodes, steps in fused islands, compile seconds (passes, analysis, scheduling,
AST) and the fuse and superopt passes' share, run seconds (median of the
repeats), the megabytes the tensor stores hold when the run ends (what the
runtime did not free), and how far the training curve is from the fused one.

    .venv/bin/python benchmarks/fusion.py [--repeats 3] [--out benchmarks/results/fusion.json]
    .venv/bin/python benchmarks/fusion.py --batch 32 --steps 500   # the examples' own episode sizes
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys

import numpy as np

from tempo.api import compile as compile_mod
from tempo.ir.ops import FusedOp
from tempo.transforms import superopt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = {  # example -> Args overrides: short runs of the real training programs
    "reinforce": {"impl": "tensor", "iterations": 6, "batch": 16, "steps": 100},
    "a2c": {"iterations": 6, "batch": 16, "steps": 100},
    "ppo": {"impl": "tensor", "iterations": 3, "epochs": 2, "batch": 16, "steps": 100},
}
VARIANTS = ("fused", "unfused", "superopt")


def variant_passes(variant: str, overrides: dict, agent: str, budget_s: float) -> dict:
    """The ``passes`` of a compile in ``variant`` (the superopt pass times operators at the run's sizes)."""
    if variant == "unfused":
        return {"fuse": False}
    if variant == "superopt":
        sizes = {"B": overrides["batch"], "T": overrides["steps"]}
        return {"superopt": superopt.Config(agent=agent, budget_s=budget_s, sizes=sizes)}
    return {}


def _times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "-"


# the example file each program name trains with (PPO here is the paper's fixed-horizon formulation)
EXAMPLE_FILES = {"ppo": "ppo_fixed_horizon", "reinforce": "reinforce", "a2c": "a2c"}


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{EXAMPLE_FILES.get(name, name)}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_once(module, overrides: dict, passes: dict) -> dict:
    """Train once, compiling with ``passes``; returns the program's size, timings and curve."""
    seen, stored, outcomes = [], [], {}
    original, executor, optimise_islands = compile_mod.compile_program, compile_mod.Executor, superopt.optimise_islands

    def recording(*args, **kwargs):
        program = original(*args, **{**kwargs, "passes": passes})
        seen.append(program)
        return program

    class Measured(executor):
        def run(self) -> None:
            super().run()
            stored.append(sum(store.nbytes() for store in self.stores.values()))

    def recording_islands(sdg, cfg):
        sdg, found = optimise_islands(sdg, cfg)
        outcomes.update(found)
        return sdg, found

    compile_mod.compile_program, compile_mod.Executor, superopt.optimise_islands = recording, Measured, recording_islands
    try:
        summary = module.main(module.Args(**overrides))
    finally:
        compile_mod.compile_program, compile_mod.Executor, superopt.optimise_islands = original, executor, optimise_islands
    program = seen[-1]
    timings = program.timings
    island_steps = sum(len(n.op.steps) for n in program.sdg.nodes.values() if isinstance(n.op, FusedOp))
    return {"nodes": len(program.sdg.nodes), "island_steps": island_steps, "run_s": timings["run"],
            "stored_mb": stored[-1] / 2 ** 20, "compile_s": sum(v for k, v in timings.items() if k != "run"),
            "fuse_s": timings.get("fuse", 0.0), "superopt_s": timings.get("superopt", 0.0),
            "returns": [float(r) for r in summary["returns"]], "islands": _island_summary(outcomes)}


def _island_summary(outcomes: dict) -> dict:
    """What the superopt pass did: islands rewritten, the rules they applied, their measured
    latencies before and after (ms at the run's sizes), and why the others were kept."""
    rewritten = [o for o in outcomes.values() if o.applied]
    rules: dict[str, int] = {}
    for o in rewritten:
        for rule in o.applied:
            rules[rule] = rules.get(rule, 0) + 1
    kept: dict[str, int] = {}
    for o in outcomes.values():
        if o.kept:
            reason = o.kept.split(" (")[0].split(":")[0]
            kept[reason] = kept.get(reason, 0) + 1
    return {"islands": len(outcomes), "rewritten": len(rewritten), "rules": rules, "kept": kept,
            "steps_removed": sum(o.steps_before - o.steps_after for o in outcomes.values()),
            "rewritten_before_ms": sum(o.before_ms for o in rewritten),
            "rewritten_after_ms": sum(o.after_ms for o in rewritten)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--batch", type=int, default=None, help="episodes per iteration (default: PROGRAMS')")
    p.add_argument("--steps", type=int, default=None, help="timesteps per episode (default: PROGRAMS')")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                   help="variants to run (fused is always among them: the others are compared with it)")
    p.add_argument("--agent", default="greedy", choices=superopt.AGENTS, help="the superopt variant's optimiser")
    p.add_argument("--budget", type=float, default=1.0, help="the superopt variant's optimisation seconds per island")
    p.add_argument("--out", default="benchmarks/results/fusion.json")
    args = p.parse_args()
    args.variants = tuple(dict.fromkeys(("fused", *args.variants)))
    sizes = {k: v for k, v in (("batch", args.batch), ("steps", args.steps)) if v is not None}
    programs = {name: {**PROGRAMS[name], **sizes} for name in args.programs}
    rows = []
    for name in args.programs:
        module = _example(name)
        runs = {variant: [] for variant in args.variants}
        for k in range(args.repeats):
            for variant in args.variants[k % len(args.variants):] + args.variants[:k % len(args.variants)]:
                passes = variant_passes(variant, programs[name], args.agent, args.budget)
                runs[variant].append(run_once(module, programs[name], passes))
        for variant, results in runs.items():
            gaps = [max(abs(x - y) for x, y in zip(a["returns"], b["returns"]))
                    for a, b in zip(results, runs["fused"])]
            rows.append({"program": name, "variant": variant, "nodes": results[0]["nodes"],
                         "island_steps": results[0]["island_steps"],
                         "compile_s": statistics.median(r["compile_s"] for r in results),
                         "fuse_s": statistics.median(r["fuse_s"] for r in results),
                         "superopt_s": statistics.median(r["superopt_s"] for r in results),
                         "run_s": statistics.median(r["run_s"] for r in results),
                         "stored_mb": results[0]["stored_mb"],
                         "run_s_all": [r["run_s"] for r in results], "returns": results[0]["returns"],
                         "max_return_gap_to_fused": max(gaps), "overrides": programs[name],
                         "superopt_islands": results[0]["islands"]})
    print(f"{'program':<10} {'variant':<8} {'nodes':>6} {'island steps':>12} {'compile s':>10} {'fuse s':>7} "
          f"{'superopt s':>10} {'run s':>8} {'vs unfused':>10} {'vs fused':>8} {'stored MB':>9} {'return gap':>10}")
    for row in rows:
        base = {r["variant"]: r["run_s"] for r in rows if r["program"] == row["program"]}
        row["run_speedup"] = base["unfused"] / row["run_s"] if "unfused" in base else None
        row["run_speedup_vs_fused"] = base["fused"] / row["run_s"]
        print(f"{row['program']:<10} {row['variant']:<8} {row['nodes']:>6} {row['island_steps']:>12} "
              f"{row['compile_s']:>10.2f} {row['fuse_s']:>7.2f} {row['superopt_s']:>10.2f} {row['run_s']:>8.2f} "
              f"{_times(row['run_speedup']):>10} {_times(row['run_speedup_vs_fused']):>8} {row['stored_mb']:>9.2f} "
              f"{row['max_return_gap_to_fused']:>10.3g}")
    for row in rows:
        if row["variant"] == "superopt":
            isl = row["superopt_islands"]
            print(f"{row['program']}: superopt removed {isl['steps_removed']} steps; rewrote {isl['rewritten']} of "
                  f"{isl['islands']} islands "
                  f"({isl['rewritten_before_ms']:.3f} -> {isl['rewritten_after_ms']:.3f} ms measured); rules "
                  f"{isl['rules']}; kept {isl['kept']}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"repeats": args.repeats, "agent": args.agent, "budget_s": args.budget,
                   "python": sys.version.split()[0], "rows": rows}, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
