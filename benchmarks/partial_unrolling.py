"""Partial unrolling (TEMPO §5.3): the conditions a run tests and the executor's seconds, on and off.

Each program is compiled for the NumPy backend twice, with ``passes={"partial_unroll": True}``
and ``False``, and run ``--repeats`` times each, the two settings alternating:

- **recurrence**: ``s[0] = 1; s[t + 1] = s[t] * 0.5 + r[t + 1]`` over ``--steps`` scalar steps,
  where the executor's own work per step is the cost (the step's guard ``t < T - 1``);
- **reinforce**: ``examples/reinforce.py`` (CartPole written as tensor ops), ``--iterations``
  iterations of ``--batch`` episodes of ``--episode`` steps;
- **decode**: a tiny random-weight Llama (``tempo.llm.program``, hidden 32, 2 layers, causal
  attention) decoding ``--tokens`` tokens greedily.

Per program and setting: whether the unrolled AST was kept (it is where the executor plans the
same stores and frees for it), the ``if`` nodes in the AST, the conditions one run tests
(``tempo.schedule.ast.conditions_tested``) and the median wall and process CPU seconds of
``program.run`` (the generated source is built per run too). The machine may be shared: the two
settings alternate which runs first, and the CPU seconds are the steadier figure.

    .venv/bin/python benchmarks/partial_unrolling.py
    .venv/bin/python benchmarks/partial_unrolling.py --programs recurrence --steps 20000 --repeats 9
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time

import numpy as np

import tempo as tpo
from tempo.schedule import ast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rl_train, run as a script or imported

SETTINGS = {"on": {"partial_unroll": True}, "off": {"partial_unroll": False}}


def recurrence(args, passes):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(np.linspace(0.0, 1.0, args.steps), dims=(t,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = tpo.full((), 1.0, "float64")
        s[t + 1] = s[t] * 0.5 + r[t + 1]
        return ctx.compile(fetch=[s], passes=passes), {"T": args.steps}


def reinforce(args, passes):
    """The example's program as it compiles it (its run in ``main`` is the first of the repeats'
    warm-up, not timed)."""
    from rl_train import _example
    from tempo.api import compile as compile_mod

    module, compile_program, captured = _example("reinforce"), compile_mod.compile_program, []

    def capture(*a, **kw):
        program = compile_program(*a, **{**kw, "passes": {**(kw.get("passes") or {}), **passes}})
        captured.append((program, {k.name: v for k, v in kw["bounds"].items()}))
        return program

    compile_mod.compile_program = capture
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            module.main(module.Args(impl="tensor", iterations=args.iterations, batch=args.batch,
                                    steps=args.episode, backend="numpy"))
    finally:
        compile_mod.compile_program = compile_program
    return captured[0]


def decode(args, passes):
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.config import LlamaConfig
    from tempo.llm.sampling import Sampling
    from tempo.llm.weights import Weights

    config = LlamaConfig(vocab_size=160, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, max_positions=args.tokens + 2)
    with tpo.Context() as ctx:
        dp = program_mod.build(config, Weights.random(config, seed=0), np.ones((1, 1), np.int64), Attention(),
                               Sampling())
        program = ctx.compile(fetch=[dp.tokens], passes=passes)
    return program, {k.name: v for k, v in dp.bounds(config.num_layers, args.tokens).items()}


PROGRAMS = {"recurrence": recurrence, "reinforce": reinforce, "decode": decode}



def measure(name: str, args) -> dict:
    compiled = {key: PROGRAMS[name](args, passes) for key, passes in SETTINGS.items()}
    seconds = {key: [] for key in SETTINGS}
    cpu = {key: [] for key in SETTINGS}
    outputs = {}
    with contextlib.redirect_stderr(io.StringIO()):
        for k in range(args.repeats):
            for key in list(SETTINGS)[::1 if k % 2 else -1]:  # each setting first every other round
                program, bounds = compiled[key]
                start, start_cpu = time.perf_counter(), time.process_time()
                outputs[key] = program.run(bounds)
                seconds[key].append(time.perf_counter() - start)
                cpu[key].append(time.process_time() - start_cpu)
    same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(outputs["on"], outputs["off"]))
    rows = {}
    for key, (program, bounds) in compiled.items():
        rows[key] = {"kept": str(program.ast) != str(compiled["off"][0].ast), "ifs": ast.if_nodes(program.ast),
                     "tested": ast.conditions_tested(program.ast, bounds),
                     "run_s": statistics.median(seconds[key]), "cpu_s": statistics.median(cpu[key]),
                     "unroll_compile_s": program.timings.get("unroll", 0.0)}
    return {"program": name, "same_results": same, **{f"{k}_{f}": v for k, row in rows.items() for f, v in row.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--steps", type=int, default=5000, help="recurrence: steps")
    p.add_argument("--iterations", type=int, default=10, help="reinforce: iterations")
    p.add_argument("--batch", type=int, default=8, help="reinforce: episodes per iteration")
    p.add_argument("--episode", type=int, default=100, help="reinforce: steps per episode")
    p.add_argument("--tokens", type=int, default=64, help="decode: new tokens")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per setting")
    args = p.parse_args()
    print(f"{'program':<11} {'same':>5} {'unrolled':>8} {'ifs on/off':>10} {'tested on/off':>16} "
          f"{'run s on/off':>20} {'cpu s on/off':>20} {'unroll compile s':>16}")
    for name in args.programs:
        r = measure(name, args)
        print(f"{name:<11} {str(r['same_results']):>5} {str(r['on_kept']):>8} {r['on_ifs']:>4}/{r['off_ifs']:<5} "
              f"{r['on_tested']:>7}/{r['off_tested']:<8} {r['on_run_s']:>9.4f}/{r['off_run_s']:<10.4f} "
              f"{r['on_cpu_s']:>9.4f}/{r['off_cpu_s']:<10.4f} "
              f"{r['on_unroll_compile_s']:>16.3f}", flush=True)


if __name__ == "__main__":
    main()
