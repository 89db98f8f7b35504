"""``tempo superopt IN.onnx --output OUT.onnx --agent rl|greedy|backtrack|taso|eqsat --budget-seconds S``."""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tempo.errors import TempoError

PROG = "tempo superopt"


def _parser() -> argparse.ArgumentParser:
    from tempo.superopt.execute import BACKENDS
    from tempo.superopt.optimize import AGENTS

    p = argparse.ArgumentParser(
        prog=PROG, description="Optimise an ONNX inference model by rewriting its tensor graph; "
        "the written model computes the same outputs and is never slower by measurement.")
    p.add_argument("input", metavar="IN.onnx", help="the model to optimise")
    p.add_argument("--output", "-o", metavar="OUT.onnx", required=True, help="where to write it")
    p.add_argument("--agent", choices=sorted(AGENTS), default="greedy", help="the optimiser")
    p.add_argument("--budget-seconds", type=float, default=30.0, metavar="S",
                   help="time for everything from reading IN.onnx to writing OUT.onnx: the search "
                   "(RL: training, then rollouts of the trained policy, keeping and polishing the "
                   "fastest by measurement) and the check that the result computes the same "
                   "outputs and is not slower than the input; that ends within S plus about a "
                   "second for models that run in milliseconds (Python's start-up and imports "
                   "come on top; default 30)")
    p.add_argument("--load-agent", metavar="PATH", help="a trained RL agent to use instead of training")
    p.add_argument("--save-agent", metavar="PATH", help="where to save the RL agent it trains")
    p.add_argument("--rules", metavar="FILE", help="a rule file (default: the shipped taso.rules)")
    p.add_argument("--alpha", type=float, default=1.05, help="backtracking slack, backtrack and taso (default 1.05)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="torch", choices=list(BACKENDS),
                   help="where graphs are measured: the search optimises for it (default torch, CPU)")
    return p


def _options(ns: argparse.Namespace) -> dict:
    if ns.agent == "rl":
        return {"load": ns.load_agent, "save": ns.save_agent, "seed": ns.seed}
    if ns.load_agent or ns.save_agent:
        raise TempoError("--load-agent and --save-agent go with --agent rl")
    return {"alpha": ns.alpha} if ns.agent in ("backtrack", "taso") else {}


def run(ns: argparse.Namespace) -> int:
    """Load, optimise, export and report, within the budget; raises TempoError for bad input."""
    from tempo.superopt import onnx_export, onnx_import
    from tempo.superopt.execute import set_default_backend
    from tempo.superopt.optimize import agent_function, optimize
    from tempo.superopt.rules import load_rules

    agent_function(ns.agent)            # its libraries imported before the budget's clock starts
    start = time.perf_counter()
    if ns.budget_seconds <= 0:
        raise TempoError(f"--budget-seconds must be positive, not {ns.budget_seconds}")
    set_default_backend(ns.backend)
    graph, warnings, model = onnx_import.load(ns.input)
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    rules = load_rules(ns.rules)
    left = ns.budget_seconds - (time.perf_counter() - start)
    outcome = optimize(graph, ns.agent, max(0.0, left), rules, **_options(ns))
    extra = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
    onnx_export.save(onnx_export.export_model(outcome.graph, extra), ns.output)
    print(f"{ns.agent}: {outcome.before_ms:.3f} ms -> {outcome.after_ms:.3f} ms "
          f"(x{outcome.speedup:.3f}) in {time.perf_counter() - start:.1f} s "
          f"(budget {ns.budget_seconds:g} s); "
          f"{len(outcome.applied)} rewrites"
          + (f" after {outcome.episodes} training episodes" if outcome.episodes else "")
          + (f"; {outcome.reason}" if outcome.reason else ""))
    return 0


def main(argv: Sequence[str]) -> int:
    """Entry point of ``tempo superopt``; returns the exit code."""
    ns = _parser().parse_args(list(argv))
    try:
        return run(ns)
    except TempoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
