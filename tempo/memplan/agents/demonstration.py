"""External demonstrations for MMap-MuZero's Reanalyse (the paper's Background, "Reanalyse").

The heuristic's solution is replayed as a game: at each decision point the
demonstrator plays the action the heuristic's solution took for that buffer
when it is legal, else the closest legal one (a placement for a placement,
Drop last). The game itself chooses offsets and intervals, so the trajectory
recorded is the one the game produces, with its own rewards.
"""
from __future__ import annotations

import numpy as np

from tempo.memplan.agents.heuristic import heuristic_solution
from tempo.memplan.game import ACTION_NAMES, COPY, DROP, NOCOPY
from tempo.memplan.problem import Instance

# the heuristic's action -> the game's actions, closest first
CLOSEST = {COPY: (COPY, NOCOPY, DROP), NOCOPY: (NOCOPY, COPY, DROP), DROP: (DROP, COPY, NOCOPY)}


class Demonstrator:
    """Plays the heuristic's decision for each buffer of ``inst`` (by its index in the game)."""

    def __init__(self, inst: Instance):
        self.wanted = [ACTION_NAMES.index(d.action) for d in heuristic_solution(inst).decisions]

    def action(self, index: int, legal: np.ndarray) -> int:
        """The heuristic's action for buffer ``index`` if ``legal``, else the closest legal one."""
        return next(a for a in CLOSEST[self.wanted[index]] if legal[a])


def policy_target(action: int, legal: np.ndarray, smoothing: float = 0.1) -> np.ndarray:
    """The demonstrator's policy target: ``action``, with ``smoothing`` spread over the legal actions."""
    target = smoothing * legal / legal.sum()
    target[action] += 1.0 - smoothing
    return target


def returns_to_go(rewards: list[float], discount: float) -> np.ndarray:
    """Discounted return from each step to the end of a finished game (the Monte Carlo value)."""
    out = np.zeros(len(rewards))
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + discount * g
        out[t] = g
    return out
