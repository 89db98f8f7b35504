"""What the simplification passes do to the RL examples' programs: nodes after each pass, compile time per stage.

Each example is compiled (not run, unless ``--run``) twice per repeat, with
every pass (``all``) and with the simplification passes switched off
(``none``: :data:`tempo.transforms.SIMPLIFICATION`), alternating which goes
first. Reported per program: the SDG's node count before the pipeline and
after each pass (the ``all`` variant's, and ``none``'s after vectorize and
fuse), and the median seconds of each compile stage (every pass, isl's
analysis, scheduling and AST build) in both variants. With ``--run`` each
compile also trains, and the run seconds and returns are compared.

    .venv/bin/python benchmarks/simplification.py [--repeats 3] [--run]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys

import tempo as tpo
from tempo.transforms import SIMPLIFICATION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = {  # example -> Args overrides: short runs of the real training programs
    "ppo": {"impl": "tensor", "iterations": 2, "batch": 8, "steps": 20},
    "reinforce": {"impl": "tensor", "iterations": 2, "batch": 8, "steps": 20},
    "a2c": {"iterations": 2, "batch": 8, "steps": 20},
}
VARIANTS = {"all": {}, "none": {name: False for name in SIMPLIFICATION}}


# the example file each program name trains with (PPO here is the paper's fixed-horizon formulation)
EXAMPLE_FILES = {"ppo": "ppo_fixed_horizon", "reinforce": "reinforce", "a2c": "a2c"}


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{EXAMPLE_FILES.get(name, name)}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _Compiled(Exception):
    """Raised in place of running: the program is compiled, and that is all that is measured."""


def compile_once(module, overrides: dict, passes: dict, run: bool) -> dict:
    """Compile the example's program with ``passes`` (and train, with ``run``); its stats."""
    original = tpo.Context.run
    seen = []

    def compile_instead(ctx, bounds, fetch=(), backend="numpy", **_):
        program = ctx.compile(list(fetch), backend=backend, passes=passes)
        seen.append(program)
        if not run:
            raise _Compiled
        return program.run(bounds)

    tpo.Context.run = compile_instead
    try:
        summary = module.main(module.Args(**overrides))
    except _Compiled:
        summary = None
    finally:
        tpo.Context.run = original
    program = seen[-1]
    return {"nodes": [(s.name, s.nodes_before, s.nodes_after) for s in program.pass_stats],
            "final_nodes": len(program.sdg.nodes), "timings": dict(program.timings),
            "returns": [float(r) for r in summary["returns"]] if summary else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--programs", nargs="+", default=["ppo"], choices=list(PROGRAMS))
    p.add_argument("--run", action="store_true", help="also train, and compare run seconds and returns")
    p.add_argument("--out", default="benchmarks/results/simplification.json")
    args = p.parse_args()
    report = {}
    for name in args.programs:
        module = _example(name)
        runs = {variant: [] for variant in VARIANTS}
        order = list(VARIANTS)
        for k in range(args.repeats):
            for variant in order[k % 2:] + order[:k % 2]:
                runs[variant].append(compile_once(module, PROGRAMS[name], VARIANTS[variant], args.run))
        report[name] = {variant: _summary(results) for variant, results in runs.items()}
        _print(name, report[name])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"programs": {n: PROGRAMS[n] for n in args.programs}, "repeats": args.repeats,
                   "results": report}, f, indent=1)
    print(f"wrote {args.out}")


def _summary(results: list[dict]) -> dict:
    stages = list(results[0]["timings"])
    return {"nodes": results[0]["nodes"], "final_nodes": results[0]["final_nodes"],
            "seconds": {s: statistics.median(r["timings"][s] for r in results) for s in stages},
            "compile_s": statistics.median(sum(v for k, v in r["timings"].items() if k != "run") for r in results),
            "returns": results[0]["returns"]}


def _print(name: str, variants: dict) -> None:
    print(f"== {name}")
    for variant, s in variants.items():
        counts = " -> ".join([str(s["nodes"][0][1])] + [f"{n} {after}" for n, _, after in s["nodes"]])
        print(f"  {variant:>4} nodes: {counts}")
    stages = list(variants["all"]["seconds"])
    stages += [s for s in variants["none"]["seconds"] if s not in stages]
    print("  stage seconds (median):  " + "  ".join(f"{st}" for st in stages) + "  compile")
    for variant, s in variants.items():
        cells = "  ".join(f"{s['seconds'].get(st, 0.0):.3f}" for st in stages)
        print(f"  {variant:>4}: {cells}  {s['compile_s']:.2f}")
    if variants["all"]["returns"] is not None:
        same = variants["all"]["returns"] == variants["none"]["returns"]
        print(f"  returns {'identical' if same else 'DIFFER'}: {variants['all']['returns']}")


if __name__ == "__main__":
    main()
