"""Cost-model searches in the manner of TASO: greedy descent and backtracking with slack.

Both rank candidate graphs by :class:`~tempo.superopt.costmodel.CostModel`
and stop when the time budget runs out. Backtracking keeps a priority queue
of graphs and expands any candidate whose cost is within ``alpha`` times the
best cost found so far, so it can accept a temporarily worse graph.
:func:`taso` is backtracking under TASO's own sum, which charges the
weight-only operators that this package's model leaves to constant folding.
"""
from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field

from tempo.superopt.costmodel import CostModel
from tempo.superopt.graph import Graph
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import Rule


@dataclass
class SearchResult:
    """The best graph a search found, the rules applied to reach it, and search statistics."""

    graph: Graph
    applied: list[str]
    cost: float
    explored: int = 0
    trace: list[float] = field(default_factory=list)
    origin: str = ""                # how the graph was found, where a search has several ways
    stages: dict[str, Graph] = field(default_factory=dict)  # earlier graphs of the search worth
                                                            # timing beside the result, by name
    episodes: int = 0               # training episodes played first (a learned search)


def greedy(graph: Graph, rules: list[Rule], budget_s: float, model: CostModel | None = None
           ) -> SearchResult:
    """Repeatedly take the cheapest candidate while it lowers the cost (at the deadline, the
    cheapest of the candidates priced so far)."""
    model = model or CostModel()
    deadline = time.perf_counter() + budget_s
    best = SearchResult(graph, [], model.cost(graph))
    best.trace.append(best.cost)
    while time.perf_counter() < deadline:
        cands = candidates(best.graph, rules)
        best.explored += len(cands)
        if not cands:
            break
        costs = []
        for c in cands:
            if costs and time.perf_counter() >= deadline:
                break
            costs.append(model.cost(c.graph))
        i = min(range(len(costs)), key=costs.__getitem__)
        if costs[i] >= best.cost:
            break
        best = SearchResult(cands[i].graph, [*best.applied, cands[i].rule.name], costs[i],
                            best.explored, [*best.trace, costs[i]])
    return best


def taso(graph: Graph, rules: list[Rule], budget_s: float, alpha: float = 1.05,
         max_queue: int = 2000) -> SearchResult:
    """:func:`backtrack` under TASO's own sum, weight-only operators charged
    (``CostModel(fold_weights=False)``): the search X-RLflow compares against, blind to
    what constant folding removes."""
    return backtrack(graph, rules, budget_s, alpha, CostModel(fold_weights=False), max_queue)


def backtrack(graph: Graph, rules: list[Rule], budget_s: float, alpha: float = 1.05,
              model: CostModel | None = None, max_queue: int = 2000) -> SearchResult:
    """TASO's backtracking search: expand queued graphs cheapest first, keep those within alpha."""
    model = model or CostModel()
    deadline = time.perf_counter() + budget_s
    start = model.cost(graph)
    best = SearchResult(graph, [], start, trace=[start])
    tie = itertools.count()
    queue = [(start, next(tie), graph, [])]
    seen = {graph.key()}
    while queue and time.perf_counter() < deadline:
        cost, _, g, applied = heapq.heappop(queue)
        for c in candidates(g, rules):
            if time.perf_counter() >= deadline:
                break
            best.explored += 1
            if c.graph.key() in seen:
                continue
            seen.add(c.graph.key())
            new_cost = model.cost(c.graph)
            if new_cost < best.cost:
                best.graph, best.applied, best.cost = c.graph, [*applied, c.rule.name], new_cost
                best.trace.append(new_cost)
            if new_cost < alpha * best.cost and len(queue) < max_queue:
                heapq.heappush(queue, (new_cost, next(tie), c.graph, [*applied, c.rule.name]))
    return best
