"""MMap-MuZero-prod (§5.1): the better of the heuristic's and MMap-MuZero's solutions."""
from __future__ import annotations

from tempo.memplan.agents import heuristic, muzero
from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.problem import Instance


def solve(inst: Instance, budget_seconds: float, seed: int = 0) -> SearchResult:
    """Run the heuristic, give MMap-MuZero the rest of the budget, keep the higher reward."""
    tracker = Tracker(inst, budget_seconds)
    tracker.offer_solution(heuristic.heuristic_solution(inst))
    started = tracker.elapsed()
    found = muzero.solve(inst, max(budget_seconds - started, 1e-3), seed)
    for seconds, reward in found.curve:
        if reward > tracker.best.reward:
            tracker.curve.append((started + seconds, reward))
    if found.solution.reward > tracker.best.reward:
        tracker.best = found.solution
    tracker.episodes += found.episodes
    tracker.games += [(started + seconds, reward) for seconds, reward in found.games]
    return tracker.result()
