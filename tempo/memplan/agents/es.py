"""Evolutionary search (Salimans et al., 2017) over the actions to play, as in §5.1.

The paper's baseline "performs a guided search across the search space of
actions to play in the MMapGame", a space that "grows too large to explore
efficiently" as programs grow. Here ``theta`` holds one preference per buffer
and action (Copy, NoCopy, Drop), so the search space has three numbers per
buffer; a game plays, at each decision point, the legal action the decided
buffer prefers most. Games run with the automatic moves and the Drop-backup of
MMap-MuZero's self-play (:mod:`~tempo.memplan.agents.episode`), so no game is
lost. ``theta`` starts at zero (the first generation plays the perturbations'
random preferences); each generation plays ``population`` mirrored
perturbations ``theta +- sigma * eps``, turns the returns into centred ranks and
moves ``theta`` along ``sum(rank_i * eps_i) / (n * sigma)`` with Adam.

:mod:`~tempo.memplan.agents.es_linear` is the same search over a linear policy
of buffer and placement features (a handful of weights whatever the program's
size), a stronger baseline than the paper's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.agents.episode import Episode
from tempo.memplan.problem import Instance


@dataclass(frozen=True)
class ESConfig:
    """Hyper-parameters of evolutionary search."""

    population: int = 8          # mirrored pairs per generation
    sigma: float = 0.1           # perturbation scale
    learning_rate: float = 0.05  # Adam step


def centred_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of ``x`` scaled to [-0.5, 0.5] (ties keep their order)."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / max(len(x) - 1, 1) - 0.5


def evolve(play: Callable[[np.ndarray], float], theta: np.ndarray, tracker: Tracker,
           rng: np.random.Generator, config: ESConfig) -> SearchResult:
    """Salimans et al.'s ES on ``play`` (parameters -> return) from ``theta`` until the budget is spent."""
    m, v, t = np.zeros_like(theta), np.zeros_like(theta), 0
    while not tracker.out_of_time():
        eps = rng.normal(size=(config.population, *theta.shape))
        returns = []
        for e in eps:
            for sign in (1, -1):
                returns.append(play(theta + sign * config.sigma * e))
                if tracker.out_of_time():
                    return tracker.result()
        ranks = centred_ranks(np.array(returns)).reshape(-1, 2)
        grad = np.tensordot(ranks[:, 0] - ranks[:, 1], eps, axes=1) / (
            2 * config.population * config.sigma)
        t += 1
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad ** 2
        theta = theta + config.learning_rate * (m / (1 - 0.9 ** t)) / (
            np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return tracker.result()


def play_preferences(ep: Episode, preferences: np.ndarray, tracker: Tracker) -> float:
    """One game in which each decision takes the legal action its buffer prefers; returns its return."""
    ep.play(lambda: int(np.argmax(np.where(ep.legal(), preferences[ep.game.index], -np.inf))))
    return tracker.offer(ep.game)


def solve(inst: Instance, budget_seconds: float, seed: int = 0,
          config: ESConfig = ESConfig()) -> SearchResult:
    """Evolutionary search over per-buffer action preferences; the best complete game wins."""
    tracker = Tracker(inst, budget_seconds)
    ep = Episode(inst)
    theta = np.zeros((len(inst.buffers), 3))
    return evolve(lambda p: play_preferences(ep, p, tracker), theta, tracker,
                  np.random.default_rng(seed), config)
