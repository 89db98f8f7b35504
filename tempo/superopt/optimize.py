"""One entry point for every optimiser, with the guarantees the command gives.

:func:`optimize` runs an agent from :data:`AGENTS`, then checks the result
computes the same outputs as the input (on random inputs) and measures both
graphs interleaved; the input is kept whenever the optimised graph is not
faster, so the result is never slower. The time budget covers the search and
that check together.
"""
from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.execute import (DECISION_COMPILES, measure_latency, run, time_interleaved,
                                    timed_rounds)
from tempo.superopt.graph import Graph
from tempo.superopt.reference import random_feeds
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import Rule, load_rules
from tempo.superopt.stats import paired_speedup

# agent name -> "module:function"; each function is (graph, rules, budget_s, **options) -> SearchResult
AGENTS = {
    "greedy": "tempo.superopt.search:greedy",
    "backtrack": "tempo.superopt.search:backtrack",
    "taso": "tempo.superopt.search:taso",
    "eqsat": "tempo.superopt.eqsat:eqsat",
    "rl": "tempo.superopt.agent:optimize_with_agent",
}


@dataclass
class Outcome:
    """What :func:`optimize` did: the graph kept, the rules applied and the measurements."""

    graph: Graph
    applied: list[str]
    optimise_s: float
    before_ms: float                # the input's median latency
    after_ms: float                 # before_ms over the paired speed-up (compare_latency)
    kept_input: bool
    reason: str = ""
    origin: str = ""                # how the search found the graph (RL: which rollout)
    rejected: list[str] | None = None   # when the input was kept: the rewrites of the graph refused
    stages: dict[str, Graph] = field(default_factory=dict)  # the search's earlier graphs (SearchResult)
    refused: Graph | None = None    # the search's result when it measured no faster than the input
    episodes: int = 0               # training episodes the search played first (the RL agent)

    @property
    def speedup(self) -> float:
        """Input latency over output latency (1.0 when the input was kept)."""
        return self.before_ms / self.after_ms


def agent_function(name: str) -> Callable:
    """The search function registered as ``name``."""
    if name not in AGENTS:
        raise TempoError(f"unknown agent '{name}' (known: {', '.join(AGENTS)})")
    module, func = AGENTS[name].split(":")
    return getattr(importlib.import_module(module), func)


# Rounds of the never-slower check, at most. With 5, on a loaded 2-core machine, the check refused
# three of twelve RL results that the benchmark's 40-round timing found 2-5% faster than the input:
# a burst of load over one or two of one graph's rounds moves its median. 40 rounds of two graphs
# at 0.1-1 ms cost one to three seconds.
CHECK_ROUNDS = 40
# The check's share of the budget, at most: with less time than its rounds need, it runs fewer.
CHECK_SHARE = 0.2
# How far past its budget optimize may return: work between two looks at the clock (an environment
# step, a PPO update, a rollout of the policy, a round of timing) is not cut short.
BUDGET_TOLERANCE_S = 1.0
# Runs of the graph that a search and its check need at the least (the cost model's per-operator
# timing, the check's rounds): a budget shorter than that many runs keeps the input unsearched.
SEARCH_RUNS = 40


def compare_latency(a: Graph, b: Graph, rounds: int = CHECK_ROUNDS, repeats: int = 10,
                    compiles: int = DECISION_COMPILES, deadline: float | None = None
                    ) -> tuple[float, float, int]:
    """The median latency of ``a``, ``b``'s speed-up over it (the median of the per-round
    cycle-paired ratios ``a / b``, :func:`~tempo.superopt.stats.paired_speedup`) and the rounds
    timed: interleaved to share the noise, ``rounds`` at most, fewer where ``deadline`` comes
    first."""
    lat = time_interleaved({"a": a, "b": b}, rounds, repeats, compiles=compiles, deadline=deadline)
    timed = timed_rounds(lat["a"], repeats)
    return lat["a"].median_ms, paired_speedup(lat["a"], lat["b"], timed), timed


def check_seconds(run_ms: float, budget_s: float) -> float:
    """The time set aside for the check of a result of a graph that runs in ``run_ms``: what
    :data:`CHECK_ROUNDS` rounds of two such graphs take (doubled: interleaved calls of several
    compiles run slower than one compile's repeats), at most :data:`CHECK_SHARE` of
    ``budget_s``."""
    return min(CHECK_SHARE * budget_s, 2 * CHECK_ROUNDS * 2 * 11 * run_ms / 1e3)


def same_outputs(a: Graph, b: Graph, seed: int = 0) -> bool:
    """Whether ``a`` and ``b`` agree (to float32 tolerance) on random inputs; a NaN agrees
    with a NaN in the same place (random inputs give NaNs to ``sqrt`` and ``log``)."""
    feeds = random_feeds(a, seed)
    return all(np.allclose(x, y, rtol=1e-3, atol=1e-4, equal_nan=True)
               for x, y in zip(run(a, feeds), run(b, feeds)))


def optimize(graph: Graph, agent: str = "greedy", budget_s: float = 30.0,
             rules: list[Rule] | None = None, **options) -> Outcome:
    """Optimise ``graph`` with ``agent``; never returns a slower or different graph.

    ``budget_s`` covers the whole call but the import of the agent's module:
    the search, then the check of its result (same outputs, then up to
    :data:`CHECK_ROUNDS` rounds timed against the input). The check's time
    (:func:`check_seconds`) is set aside first, the search gets the rest, and
    the check's rounds stop at the budget's end: the call returns within
    ``budget_s`` plus :data:`BUDGET_TOLERANCE_S` for graphs that run in
    milliseconds (every timing runs one round at least). A graph too slow for the budget to
    run :data:`SEARCH_RUNS` times is returned unsearched; one too slow for the check's
    rounds is timed in fewer, and the outcome's ``reason`` says how many.

    A graph no rule matches is returned at once, unsearched (every search would stop there,
    the RL agent after training on it for the whole budget), unless ``options`` ask for a
    trained RL agent to be saved."""
    import torch

    search = agent_function(agent)
    deadline = time.perf_counter() + budget_s
    torch.set_num_threads(1)
    rules = rules if rules is not None else load_rules()
    if not options.get("save") and not candidates(graph, rules):
        before = measure_latency(graph, warmup=0, repeats=1).median_ms
        return Outcome(graph, [], 0.0, before, before, True, "no rule matches")
    before = measure_latency(graph, warmup=1, repeats=2).median_ms
    if before * SEARCH_RUNS / 1e3 > deadline - time.perf_counter():
        return Outcome(graph, [], 0.0, before, before, True,
                       f"one run takes {before / 1e3:.2f} s: the budget cannot time "
                       f"{SEARCH_RUNS} runs, the fewest a search and its check need")
    check_s = check_seconds(before, budget_s)
    start = time.perf_counter()
    result = search(graph, rules, max(0.0, deadline - check_s - start), **options)
    elapsed = time.perf_counter() - start
    if result.graph.key() == graph.key():
        return Outcome(graph, [], elapsed, before, before, True, "no rewrite found",
                       episodes=result.episodes)
    if not same_outputs(graph, result.graph):
        return Outcome(graph, [], elapsed, before, before, True, "outputs differed; input kept",
                       result.origin, result.applied, result.stages, episodes=result.episodes)
    # no more compiles than the rounds that fit in check_s (two graphs, 11 runs each, doubled),
    # and rounds of fewer cycles where not even one fits
    compiles = max(1, min(DECISION_COMPILES, int(check_s * 1e3 / (4 * 11 * before))))
    repeats = max(2, min(10, int(check_s * 1e3 / (4 * before)) - 1))
    before, speedup, rounds = compare_latency(graph, result.graph, repeats=repeats,
                                              compiles=compiles, deadline=deadline)
    note = "" if rounds == CHECK_ROUNDS else (
        f"timed in {rounds} of {CHECK_ROUNDS} rounds: one run takes {before:.1f} ms")
    if speedup <= 1.0:
        return Outcome(graph, [], elapsed, before, before, True,
                       f"not faster when measured ({speedup:.3f}x the input's speed, "
                       f"{before:.4f} ms{'; ' + note if note else ''})",
                       result.origin, result.applied, result.stages, result.graph, result.episodes)
    return Outcome(result.graph, result.applied, elapsed, before, before / speedup, False, note,
                   origin=result.origin, stages=result.stages, episodes=result.episodes)
