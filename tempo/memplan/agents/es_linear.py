"""Evolutionary search over a linear policy of action features: a stronger ES than §5.1's.

The policy scores each legal action with ``theta . phi(s, a)`` (features of
the buffer and of the action's placement, one weight block per action kind)
and plays the highest score. Its 21 weights generalise across buffers, so its
search space does not grow with the program, unlike the paper's search over
the actions themselves (:mod:`~tempo.memplan.agents.es`). The search is the
same (:func:`~tempo.memplan.agents.es.evolve`); a lost game scores 0.
"""
from __future__ import annotations

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.agents.es import ESConfig, evolve
from tempo.memplan.game import GameState
from tempo.memplan.problem import Instance

BLOCK = 7


class LinearPolicy:
    """Scores Copy / NoCopy / Drop from per-action features; plays the best legal one."""

    def __init__(self, inst: Instance):
        self.steps = inst.num_steps
        self.capacity = inst.capacity
        self.benefit = max(max(b.benefit for b in inst.buffers), 1e-12)
        self.dim = 3 * BLOCK

    def features(self, game: GameState) -> np.ndarray:
        """One row per action; zeros in the other actions' weight blocks."""
        b = game.current
        phi = np.zeros((3, self.dim))
        for a, p in enumerate(game.options()):
            length = 0.0 if p is None or p.interval is None else p.interval[1] - p.interval[0] + 1
            offset = 0.0 if p is None or p.offset is None else p.offset / self.capacity
            phi[a, a * BLOCK:(a + 1) * BLOCK] = [
                1.0, b.benefit / self.benefit, b.size / self.capacity, length / self.steps,
                offset, float(b.is_output), float(b.alias_id is not None)]
        return phi

    def play(self, game: GameState, theta: np.ndarray, tracker: Tracker) -> float:
        """Play one episode from the start with weights ``theta``; returns its return."""
        game.reset()
        while not game.done:
            scores = self.features(game) @ theta
            scores[~game.legal()] = -np.inf
            game.step(int(np.argmax(scores)))
        return tracker.offer(game)


def solve(inst: Instance, budget_seconds: float, seed: int = 0,
          config: ESConfig = ESConfig()) -> SearchResult:
    """Evolutionary search over the linear policy; the best complete episode wins."""
    rng = np.random.default_rng(seed)
    tracker = Tracker(inst, budget_seconds)
    policy, game = LinearPolicy(inst), GameState(inst)
    theta = rng.normal(0, config.sigma, policy.dim)
    return evolve(lambda th: policy.play(game, th, tracker), theta, tracker, rng, config)
