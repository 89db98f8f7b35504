"""``tempo superopt IN.onnx --output OUT.onnx --agent rl|greedy|backtrack|taso|eqsat --budget-seconds S``."""
from __future__ import annotations

import argparse
import os
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
    """Load, optimise, verify and write, within the budget; raises TempoError for a file that
    is not a readable ONNX model."""
    from tempo.files import write_bytes_atomic
    from tempo.superopt.execute import set_default_backend
    from tempo.superopt.onnx_optimize import optimize_model, warm_up
    from tempo.superopt.onnx_run import test_inputs
    from tempo.superopt.rules import load_rules

    if ns.budget_seconds <= 0:
        raise TempoError(f"--budget-seconds must be positive, not {ns.budget_seconds}")
    start = time.perf_counter()   # the budget counts the whole command, imports included
    warm_up(ns.agent)
    set_default_backend(ns.backend)
    source = _read(ns.input)
    model = _parse(ns.input, source)
    rules = load_rules(ns.rules)
    saved_before = _modified(ns.save_agent)
    left = ns.budget_seconds - (time.perf_counter() - start)
    result = optimize_model(model, ns.agent, left, rules, test_inputs(ns.input, model),
                            **_options(ns))
    if ns.save_agent and _modified(ns.save_agent) in (None, saved_before):
        result.warnings.append(f"no agent was trained, so none is saved to '{ns.save_agent}'")
    for w in result.warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    write_bytes_atomic(ns.output, result.model.SerializeToString() if result.rewritten else source)
    print(_summary(ns, result, time.perf_counter() - start))
    return 0


def _modified(path: str | None) -> int | None:
    """When the file at ``path`` was last written (ns), or None if there is none."""
    try:
        return os.stat(path).st_mtime_ns if path else None
    except FileNotFoundError:
        return None


def _read(path: str) -> bytes:
    from tempo.superopt.onnx_import import OnnxImportError

    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise OnnxImportError(f"no such ONNX file '{path}'") from None
    except OSError as exc:
        raise TempoError(f"cannot read '{path}': {exc.strerror}") from None


def _parse(path: str, source: bytes):
    import onnx

    from tempo.superopt.onnx_import import OnnxImportError

    try:
        model = onnx.load_from_string(source)
    except Exception as exc:  # protobuf decode errors have no common base
        raise OnnxImportError(f"'{path}' is not a readable ONNX model ({type(exc).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise OnnxImportError(f"'{path}' is not an ONNX model: it has no graph")
    return model


def _summary(ns: argparse.Namespace, result, seconds: float) -> str:
    o = result.outcome
    timing = f"{o.before_ms:.3f} ms -> {o.after_ms:.3f} ms (x{o.speedup:.3f}) " if o else ""
    rewrites = f"{len(o.applied)} rewrites" if o and result.rewritten else "input written unchanged"
    return (f"{ns.agent}: {timing}in {seconds:.1f} s (budget {ns.budget_seconds:g} s); {rewrites}"
            + (f" after {o.episodes} training episodes" if o and o.episodes else "")
            + (f"; {result.reason}" if result.reason else ""))


def main(argv: Sequence[str]) -> int:
    """Entry point of ``tempo superopt``; returns the exit code."""
    ns = _parser().parse_args(list(argv))
    try:
        return run(ns)
    except TempoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
