"""Compile seconds of the examples' programs and of the Llama decoding program, with each stage's.

PPO (fixed horizon; on the NumPy, torch and JAX backends) and REINFORCE
(Monte-Carlo and 8-step returns) on ``tempo/Synthetic-v0``: each example's
``main`` is called with a small point (4 environments, 16 steps, one
iteration) in this process and stopped as soon as its program is compiled
(``compile_program`` is wrapped to time it and to end the example there).
The Llama decoding program of ``benchmarks/decode.py`` (its default size, 2
layers) is built and compiled as that benchmark's compile part does. Each
program is compiled ``--repeats`` times at one thread (the minimum is
reported: the first in a fresh process counts the imports' warm-up too), in
wall and process CPU seconds, and so is each compile stage (``program.timings``,
read in process CPU seconds). Run from the root of the tree whose compiler is
measured (its ``examples/``; PPO is ``examples/ppo_fixed_horizon.py`` where
that exists, else ``examples/ppo.py``):

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

import numpy as np

from tempo.api import compile as compile_mod

POINT = {"env": "tempo/Synthetic-v0", "impl": "tensor", "obs_shape": "3,4,4", "batch": 4, "steps": 16,
         "hidden": 16, "layers": 2, "iterations": 1, "seed": 0, "backend": "numpy"}
EXAMPLES = {"ppo": (("ppo_fixed_horizon", "ppo"), {}), "ppo-torch": (("ppo_fixed_horizon", "ppo"), {"backend": "torch"}),
            "ppo-jax": (("ppo_fixed_horizon", "ppo"), {"backend": "jax"}), "reinforce": (("reinforce",), {}),
            "reinforce-8-step": (("reinforce",), {"nstep": 8})}
WALL = time.perf_counter


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


def timed(compile_program, *args, **kwargs) -> tuple[float, float, int, dict]:
    """Wall and process CPU seconds of one ``compile_program(*args, **kwargs)``, its SDG's nodes and
    its stages' process CPU seconds (the compiler's clock reads process CPU time meanwhile)."""
    wall, cpu = WALL(), time.process_time()
    time.perf_counter = time.process_time
    try:
        program = compile_program(*args, **kwargs)
    finally:
        time.perf_counter = WALL
    return WALL() - wall, time.process_time() - cpu, len(program.sdg.nodes), dict(program.timings)


def compile_seconds(module, extra: dict) -> tuple[float, float, int, dict]:
    """:func:`timed` of one compile of ``module``'s program (at ``POINT`` and ``extra``)."""
    compile_program, found = compile_mod.compile_program, []

    def timing(*args, **kwargs):
        found.append(timed(compile_program, *args, **kwargs))
        raise Compiled

    fields = {f.name for f in dataclasses.fields(module.Args)}
    compile_mod.compile_program = timing
    try:
        module.main(module.Args(**{k: v for k, v in {**POINT, **extra}.items() if k in fields}))
    except Compiled:
        pass
    finally:
        compile_mod.compile_program = compile_program
    return found[0]


def llama_seconds(layers: int) -> tuple[float, float, int, dict]:
    """:func:`timed` of one compile of ``benchmarks/decode.py``'s decoding program of ``layers`` layers."""
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.sampling import Sampling

    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    import decode

    size = decode.Size(**{**dataclasses.asdict(decode.Size()), "layers": layers})
    with tpo.Context() as ctx:
        dp = program_mod.build(decode.model_config(size, 4096), decode.weights(size, 4096), np.ones((4, 1), np.int64),
                               Attention(), Sampling())
        return timed(ctx.compile, fetch=[dp.tokens])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    programs = {label: (f"examples/{_module(names)[0]}.py",
                        lambda names=names, extra=extra: compile_seconds(_module(names)[1], extra))
                for label, (names, extra) in EXAMPLES.items()}
    programs["llama-2-layers"] = ("benchmarks/decode.py", lambda: llama_seconds(2))
    for label, (source, compile_once) in programs.items():
        runs = [compile_once() for _ in range(args.repeats)]
        best = min(runs, key=lambda r: r[1])
        rows.append({"program": label, "source": source, "nodes": runs[0][2],
                     "wall_s": min(r[0] for r in runs), "cpu_s": best[1], "stages_cpu_s": best[3],
                     "runs_wall_s": [r[0] for r in runs], "runs_cpu_s": [r[1] for r in runs]})
        print(f"{label:<16} {runs[0][2]:>6} nodes  wall {rows[-1]['wall_s']:6.2f} s  cpu {best[1]:6.2f} s  "
              + ", ".join(f"{k} {v:.3f}" for k, v in best[3].items() if v >= 0.005), flush=True)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "point": POINT, "repeats": args.repeats}, f, indent=1)


if __name__ == "__main__":
    main()
