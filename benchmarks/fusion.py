"""Fusion's effect on whole programs: the RL examples with and without the fuse pass.

Each example (REINFORCE and PPO with CartPole written as tensor ops, A2C with
gymnasium's CartPole) trains for a few iterations, once with the default
pass pipeline and once with the fuse pass left out, alternating which goes
first, ``--repeats`` times. Reported per program and variant: SDG nodes,
compile seconds (passes, analysis, scheduling, AST), run seconds (median of
the repeats), the megabytes the tensor stores hold when the run ends (what
the runtime did not free), and whether the training curves are identical.

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

import tempo.transforms as transforms
from tempo.api import compile as compile_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = {  # example -> Args overrides: short runs of the real training programs
    "reinforce": {"impl": "tensor", "iterations": 6, "batch": 16, "steps": 100},
    "a2c": {"iterations": 6, "batch": 16, "steps": 100},
    "ppo": {"impl": "tensor", "iterations": 3, "epochs": 2, "batch": 16, "steps": 100},
}
VARIANTS = {"fused": transforms.PIPELINE,
            "unfused": tuple((name, module) for name, module in transforms.PIPELINE if name != "fuse")}


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_once(module, overrides: dict, pipeline) -> dict:
    """Train once with ``pipeline``; returns the program's size, timings and curve."""
    seen, stored = [], []
    original, executor = compile_mod.compile_program, compile_mod.Executor

    def recording(*args, **kwargs):
        program = original(*args, **kwargs)
        seen.append(program)
        return program

    class Measured(executor):
        def run(self) -> None:
            super().run()
            stored.append(sum(np.asarray(v).nbytes for store in self.stores.values() for v in store.data.values()))

    transforms.PIPELINE, compile_mod.compile_program, compile_mod.Executor = pipeline, recording, Measured
    try:
        summary = module.main(module.Args(**overrides))
    finally:
        transforms.PIPELINE, compile_mod.compile_program, compile_mod.Executor = VARIANTS["fused"], original, executor
    program = seen[-1]
    timings = program.timings
    return {"nodes": len(program.sdg.nodes), "run_s": timings["run"], "stored_mb": stored[-1] / 2 ** 20,
            "compile_s": sum(v for k, v in timings.items() if k != "run"), "fuse_s": timings.get("fuse", 0.0),
            "returns": [float(r) for r in summary["returns"]]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--batch", type=int, default=None, help="episodes per iteration (default: PROGRAMS')")
    p.add_argument("--steps", type=int, default=None, help="timesteps per episode (default: PROGRAMS')")
    p.add_argument("--out", default="benchmarks/results/fusion.json")
    args = p.parse_args()
    sizes = {k: v for k, v in (("batch", args.batch), ("steps", args.steps)) if v is not None}
    programs = {name: {**PROGRAMS[name], **sizes} for name in args.programs}
    rows = []
    for name in args.programs:
        module = _example(name)
        runs = {variant: [] for variant in VARIANTS}
        for k in range(args.repeats):
            order = list(VARIANTS) if k % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                runs[variant].append(run_once(module, programs[name], VARIANTS[variant]))
        identical = all(a["returns"] == b["returns"] for a, b in zip(runs["fused"], runs["unfused"]))
        for variant, results in runs.items():
            rows.append({"program": name, "variant": variant, "nodes": results[0]["nodes"],
                         "compile_s": statistics.median(r["compile_s"] for r in results),
                         "fuse_s": statistics.median(r["fuse_s"] for r in results),
                         "run_s": statistics.median(r["run_s"] for r in results),
                         "stored_mb": results[0]["stored_mb"],
                         "run_s_all": [r["run_s"] for r in results], "identical_returns": identical,
                         "overrides": programs[name]})
    print(f"{'program':<10} {'variant':<8} {'nodes':>6} {'compile s':>10} {'fuse s':>7} {'run s':>8} "
          f"{'run speed-up':>12} {'stored MB':>9} {'same returns':>12}")
    for row in rows:
        unfused = next(r for r in rows if r["program"] == row["program"] and r["variant"] == "unfused")
        row["run_speedup"] = unfused["run_s"] / row["run_s"]
        print(f"{row['program']:<10} {row['variant']:<8} {row['nodes']:>6} {row['compile_s']:>10.2f} "
              f"{row['fuse_s']:>7.2f} {row['run_s']:>8.2f} {row['run_speedup']:>11.2f}x "
              f"{row['stored_mb']:>9.2f} {str(row['identical_returns']):>12}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"repeats": args.repeats, "python": sys.version.split()[0], "rows": rows}, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
