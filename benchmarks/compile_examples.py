"""Compile seconds of the examples' programs: PPO (fixed horizon) and REINFORCE (Monte-Carlo and 8-step returns)
on ``tempo/Synthetic-v0``.

Each example's ``main`` is called with a small point (4 environments, 16 steps,
one iteration) in this process, on the NumPy backend at one thread, and stopped
as soon as its program is compiled: ``compile_program`` is wrapped to time it
(wall and process CPU seconds) and to end the example there. Each program is
compiled ``--repeats`` times (the first in a fresh process counts the imports'
warm-up too: the minimum is reported). Run from the root of the tree whose
compiler is measured (its ``examples/``; PPO is ``examples/ppo_fixed_horizon.py``
where that exists, else ``examples/ppo.py``):

    PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/compile_examples.py --out /tmp/compile.json
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time

from tempo.api import compile as compile_mod

POINT = {"env": "tempo/Synthetic-v0", "impl": "tensor", "obs_shape": "3,4,4", "batch": 4, "steps": 16,
         "hidden": 16, "layers": 2, "iterations": 1, "seed": 0, "backend": "numpy"}
EXAMPLES = {"ppo": (("ppo_fixed_horizon", "ppo"), {}), "reinforce": (("reinforce",), {}),
            "reinforce-8-step": (("reinforce",), {"nstep": 8})}


class Compiled(Exception):
    """Raised in place of running the example once its program is compiled."""


def _module(names: tuple[str, ...]):
    for name in names:
        path = os.path.join(os.getcwd(), "examples", f"{name}.py")
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location(name, path)
            module = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return name, module
    raise FileNotFoundError(f"none of {names} under examples/")


def compile_seconds(module, extra: dict) -> tuple[float, float, int]:
    """Wall and process CPU seconds of one compile of ``module``'s program (at ``POINT`` and ``extra``),
    and its SDG's nodes."""
    compile_program, timed = compile_mod.compile_program, []

    def timing(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        program = compile_program(*args, **kwargs)
        timed.append((time.perf_counter() - wall, time.process_time() - cpu, len(program.sdg.nodes)))
        raise Compiled

    fields = {f.name for f in dataclasses.fields(module.Args)}
    compile_mod.compile_program = timing
    try:
        module.main(module.Args(**{k: v for k, v in {**POINT, **extra}.items() if k in fields}))
    except Compiled:
        pass
    finally:
        compile_mod.compile_program = compile_program
    return timed[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    for label, (names, extra) in EXAMPLES.items():
        name, module = _module(names)
        runs = [compile_seconds(module, extra) for _ in range(args.repeats)]
        rows.append({"program": label, "example": f"examples/{name}.py", "nodes": runs[0][2],
                     "wall_s": min(r[0] for r in runs), "cpu_s": min(r[1] for r in runs),
                     "runs_wall_s": [r[0] for r in runs], "runs_cpu_s": [r[1] for r in runs]})
        print(f"{label:<10} {name:<20} {runs[0][2]:>6} nodes  wall {rows[-1]['wall_s']:6.2f} s  "
              f"cpu {rows[-1]['cpu_s']:6.2f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "point": POINT, "repeats": args.repeats}, f, indent=1)


if __name__ == "__main__":
    main()
