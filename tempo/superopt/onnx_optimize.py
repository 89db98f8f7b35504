"""Optimise an ONNX model: import its region, search, splice back, verify, or keep the input.

:func:`optimize_model` is what ``tempo superopt`` runs. The region the rules
can use (:mod:`tempo.superopt.onnx_import`) is optimised by
:func:`tempo.superopt.optimize.optimize`, timed and checked on the values its
inputs take when the whole model runs on its inputs (:mod:`tempo.superopt.onnx_run`);
the result is spliced into the model (:mod:`tempo.superopt.onnx_splice`) and
the spliced model is verified against the input model. Whenever a step
cannot vouch for its result, the input model is kept and a warning says why:
the tool never writes a model that is invalid, computes other outputs, or
measured slower.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import onnx

from tempo.superopt.onnx_export import Inexpressible
from tempo.superopt.onnx_import import import_model
from tempo.superopt.onnx_run import Feeds, ModelRunError, model_feeds, verify
from tempo.superopt.onnx_splice import splice
from tempo.superopt.optimize import BUDGET_TOLERANCE_S, SEARCH_RUNS, Outcome, optimize
from tempo.superopt.reference import given_feeds
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import Rule, load_rules

# The time set aside for verifying the written model: loading and running both models (twice
# what loading and running the input once took, doubled for a loaded machine) and the checker.
ONNX_RUNS_TO_VERIFY = 4
# Runs of the model the RL agent needs at the least: a step of an episode times two graphs for
# 10 cycles, and its steps and updates are not cut short at the deadline (light CNNs at 0.1-1 s
# a run overran 30 s budgets by 10-100 s), so a model slower than this is not given to it.
RL_RUNS = 400
CHECKER_S = 0.3


@dataclass
class ModelOutcome:
    """What :func:`optimize_model` did: the model to write (None: the input, unchanged), the
    region's outcome (None when no search ran), warnings, and why the input was kept."""

    model: onnx.ModelProto | None
    outcome: Outcome | None
    warnings: list[str] = field(default_factory=list)
    reason: str = ""
    imported_nodes: int = 0

    @property
    def rewritten(self) -> bool:
        """Whether the model to write differs from the input."""
        return self.model is not None


def warm_up(agent: str = "greedy") -> None:
    """Import what :func:`optimize_model` uses (the agent's libraries, torch, onnxruntime, ONNX's
    reference evaluator) and read the shipped rules (for eqsat, into a fresh e-graph), so a
    budget's clock that starts after this counts work, not imports."""
    import onnx.reference  # noqa: F401  (imported for its start-up cost)
    import torch  # noqa: F401

    from tempo.superopt.onnx_run import runner
    from tempo.superopt.optimize import agent_function

    agent_function(agent)
    rules = load_rules()
    if agent == "eqsat":
        from tempo.superopt.eqsat import prepare

        prepare(rules)
    try:
        runner(onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], [])), "onnxruntime")
    except ModelRunError:
        pass


def optimize_model(model: onnx.ModelProto, agent: str = "greedy", budget_s: float = 30.0,
                   rules: list[Rule] | None = None, feeds: Feeds | None = None,
                   **options) -> ModelOutcome:
    """Optimise ``model`` with ``agent`` within ``budget_s`` seconds (the whole call).

    ``feeds`` are the model's own inputs to measure and check on (generated per
    element type otherwise). The result is never invalid, never computes other
    outputs on those inputs and is never slower by measurement: the input is
    kept otherwise, with the reason in ``reason``."""
    deadline = time.perf_counter() + budget_s
    imported = import_model(model)
    result = ModelOutcome(None, None, list(imported.warnings),
                          imported_nodes=len(imported.produced))
    rules = rules if rules is not None else load_rules()
    if not options.get("save") and not candidates(imported.graph, rules):
        result.reason = "no rule matches"
        return result
    try:
        run = model_feeds(model, feeds, [n.attr("name") for n in imported.graph.inputs])
    except ModelRunError as exc:
        return _kept(result, f"the input model cannot be run to measure and check a result: {exc}")
    verify_s = ONNX_RUNS_TO_VERIFY * (run.load_s + run.run_s) + CHECKER_S
    left = deadline - verify_s - time.perf_counter()
    runs = RL_RUNS if agent == "rl" else SEARCH_RUNS
    if left <= 0:
        return _kept(result, f"checking a result takes {verify_s:.2f} s (loading the model "
                     f"{run.load_s * 1e3:.1f} ms, running it {run.run_s * 1e3:.1f} ms, "
                     f"{ONNX_RUNS_TO_VERIFY} times each): the budget leaves no time to search")
    if runs * run.run_s > left:
        return _kept(result, f"one run of the model takes {run.run_s * 1e3:.1f} ms: the {left:.2f} s "
                     f"the budget leaves cannot time the {runs} runs {agent} and its check need "
                     "at the least")
    if agent == "rl":       # its steps and updates are not cut short at its deadline
        left -= min(BUDGET_TOLERANCE_S, 0.25 * left)
    with given_feeds(run.values):
        result.outcome = optimize(imported.graph, agent, left, rules, **options)
    if result.outcome.kept_input:
        result.reason = result.outcome.reason
        return result
    try:
        written = splice(imported, result.outcome.graph)
    except Inexpressible as exc:
        return _kept(result, f"the rewrite cannot be written at the model's opset: {exc}")
    why = verify(written, model, run.feeds)
    if why is not None:
        return _kept(result, f"the rewritten model was not written: {why}")
    result.model = written
    return result


def _kept(result: ModelOutcome, why: str) -> ModelOutcome:
    result.warnings.append(f"{why}; the input model is written unchanged")
    result.reason = why
    return result
