"""Random legal play (§5.1): uniformly random legal actions, episode after episode.

Games run in the harness every search agent here uses (:mod:`episode`): moves
that need no decision are automatic, and Drop-backup rewinds a game that
reaches a lost state, so the random player's games are complete too.
"""
from __future__ import annotations

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.agents.episode import Episode
from tempo.memplan.problem import Instance


def play_random(ep: Episode, rng: np.random.Generator) -> None:
    """Play a fresh game in ``ep`` to its end, each decision uniformly among the legal actions."""
    ep.play(lambda: int(rng.choice(np.flatnonzero(ep.legal()))))


def solve(inst: Instance, budget_seconds: float, seed: int = 0) -> SearchResult:
    """Random episodes until the budget is spent; the best complete one wins."""
    rng = np.random.default_rng(seed)
    tracker = Tracker(inst, budget_seconds)
    ep = Episode(inst)
    while True:
        play_random(ep, rng)
        tracker.offer(ep.game)
        if tracker.out_of_time():
            return tracker.result()
