"""Evolutionary search (Salimans et al., 2017) over a policy that scores legal actions (§5.1).

The policy is linear: each legal action gets the score ``theta . phi(s, a)``
(features of the buffer and of the action's placement, one weight block per
action kind) and the highest score is played. Each generation evaluates
``population`` mirrored perturbations ``theta +- sigma * eps`` by playing full
episodes (a lost game scores 0), turns returns into centred ranks and moves
``theta`` along ``sum(rank_i * eps_i) / (n * sigma)`` with Adam.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.game import GameState
from tempo.memplan.problem import Instance

BLOCK = 7


@dataclass(frozen=True)
class ESConfig:
    """Hyper-parameters of evolutionary search."""

    population: int = 8          # mirrored pairs per generation
    sigma: float = 0.1           # perturbation scale
    learning_rate: float = 0.05  # Adam step


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


def _centred_ranks(x: np.ndarray) -> np.ndarray:
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / max(len(x) - 1, 1) - 0.5


def solve(inst: Instance, budget_seconds: float, seed: int = 0,
          config: ESConfig = ESConfig()) -> SearchResult:
    """Evolutionary search until the budget is spent; the best complete episode wins."""
    rng = np.random.default_rng(seed)
    tracker = Tracker(inst, budget_seconds)
    policy, game = LinearPolicy(inst), GameState(inst)
    theta = rng.normal(0, config.sigma, policy.dim)
    m, v, t = np.zeros_like(theta), np.zeros_like(theta), 0
    while not tracker.out_of_time():
        eps = rng.normal(size=(config.population, policy.dim))
        returns = []
        for e in eps:
            for sign in (1, -1):
                returns.append(policy.play(game, theta + sign * config.sigma * e, tracker))
                if tracker.out_of_time():
                    return tracker.result()
        ranks = _centred_ranks(np.array(returns)).reshape(-1, 2)
        grad = ((ranks[:, 0] - ranks[:, 1]) @ eps) / (2 * config.population * config.sigma)
        t += 1
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad ** 2
        theta = theta + config.learning_rate * (m / (1 - 0.9 ** t)) / (
            np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return tracker.result()
