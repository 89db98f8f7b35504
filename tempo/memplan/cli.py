"""``tempo memplan``: solve, validate and extract memory-mapping instances.

    tempo memplan solve INSTANCE.json --agent heuristic --budget-seconds 10 --output SOL.json
    tempo memplan validate INSTANCE.json SOL.json
    tempo memplan extract mlp --scale 2 --output mlp.json
    tempo memplan extract tempo examples/ppo_fixed_horizon.py --args "--obs-shape 3,64,64" --budget 256MB --output ppo.json
"""
from __future__ import annotations

import argparse
import sys

from tempo.errors import TempoError

PROG = "tempo memplan"


def _solve(ns) -> int:
    from tempo.memplan.agents import get_agent
    from tempo.memplan.problem import load_instance, solution_to_json, write_json_atomic

    if ns.budget_seconds <= 0:
        raise TempoError(f"--budget-seconds must be positive, got {ns.budget_seconds}")
    inst = load_instance(ns.instance)
    result = get_agent(ns.agent)(inst, ns.budget_seconds, ns.seed)
    write_json_atomic(ns.output, solution_to_json(result.solution))
    print(f"{ns.agent}: reward {result.solution.reward:.6g} after {result.episodes} "
          f"episode(s); wrote {ns.output}")
    return 0


def _validate(ns) -> int:
    from tempo.memplan.problem import load_instance, load_solution
    from tempo.memplan.validate import Violation, validate

    inst, sol = load_instance(ns.instance), load_solution(ns.solution)
    try:
        validate(inst, sol)
    except Violation as v:
        print(f"invalid: {v}")
        return 1
    print(f"valid: reward {sol.reward:.6g}")
    return 0


def _extract(ns) -> int:
    from tempo.memplan.extract import PROGRAMS, extract_instance
    from tempo.memplan.problem import instance_to_json, write_json_atomic

    if ns.program == "tempo":
        inst = _tempo_instance(ns)
    elif ns.program not in PROGRAMS:
        raise TempoError(f"unknown program '{ns.program}' (choose from {', '.join(PROGRAMS)} or tempo)")
    else:
        inst = extract_instance(ns.program, ns.scale, capacity_fraction=ns.capacity_fraction)
    write_json_atomic(ns.output, instance_to_json(inst))
    print(f"{inst.name}: {len(inst.buffers)} buffers, {inst.num_steps} steps; wrote {ns.output}")
    return 0


def _tempo_instance(ns):
    """The instance of the first program the Tempo script ``ns.script`` compiles."""
    import shlex

    from tempo.memplan.extract import tempo_schedule
    from tempo.runtime.memory import parse_bytes

    if not ns.script:
        raise TempoError("extract tempo takes the Tempo script to compile: tempo memplan extract tempo PROGRAM.py")
    budget = None if ns.budget is None else parse_bytes(ns.budget)
    if ns.budget is not None and budget is None:
        raise TempoError(f"--budget takes a size such as '256MB', got {ns.budget!r}")
    program, bounds = tempo_schedule.capture(ns.script, shlex.split(ns.args), budget)
    extracted = tempo_schedule.program_instance(program, bounds, budget)
    print(f"{ns.script}: {len(extracted.outputs)} tensors the default plan swaps, "
          f"{extracted.instance.capacity / 2**20:.1f} MiB of the budget left for them")
    return extracted.instance


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="The memory-mapping game "
                                     "(MMap-MuZero) and its agents.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    solve = commands.add_parser("solve", help="solve an instance with an agent")
    solve.add_argument("instance", metavar="INSTANCE.json")
    solve.add_argument("--agent", default="heuristic",
                       help="heuristic, random, es, es-linear, muzero, mcts, nosearch or hybrid")
    solve.add_argument("--budget-seconds", type=float, default=10.0)
    solve.add_argument("--seed", type=int, default=0)
    solve.add_argument("--output", required=True, metavar="SOLUTION.json")
    solve.set_defaults(run=_solve)
    check = commands.add_parser("validate", help="check a solution against every constraint")
    check.add_argument("instance", metavar="INSTANCE.json")
    check.add_argument("solution", metavar="SOLUTION.json")
    check.set_defaults(run=_validate)
    extract = commands.add_parser("extract", help="build an instance from a JAX-compiled program or a "
                                  "Tempo script's schedule")
    extract.add_argument("program", help="mlp, transformer, convnet, or tempo (then SCRIPT)")
    extract.add_argument("script", nargs="?", metavar="SCRIPT.py",
                         help="with tempo: the script whose first compiled program is extracted")
    extract.add_argument("--args", default="", help="with tempo: the script's command line arguments")
    extract.add_argument("--budget", help="with tempo: the device budget ('256MB'); default: the script's")
    extract.add_argument("--scale", type=int, default=1, help="model size (layers / blocks)")
    extract.add_argument("--capacity-fraction", type=float, default=0.25,
                         help="fast memory as a fraction of the peak live bytes")
    extract.add_argument("--output", required=True, metavar="INSTANCE.json")
    extract.set_defaults(run=_extract)
    return parser


def main(argv: list[str]) -> int:
    """Entry point of ``tempo memplan``; returns the exit code."""
    ns = _parser().parse_args(argv)
    try:
        return ns.run(ns)
    except TempoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
