"""Random legal play (§5.1): uniformly random legal actions, episode after episode."""
from __future__ import annotations

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.game import GameState
from tempo.memplan.problem import Instance


def play_random(game: GameState, rng: np.random.Generator) -> None:
    """Play ``game`` to its end with uniformly random legal actions."""
    while not game.done:
        game.step(int(rng.choice(np.flatnonzero(game.legal()))))


def solve(inst: Instance, budget_seconds: float, seed: int = 0) -> SearchResult:
    """Random episodes until the budget is spent; the best complete one wins."""
    rng = np.random.default_rng(seed)
    tracker = Tracker(inst, budget_seconds)
    game = GameState(inst)
    while True:
        game.reset()
        play_random(game, rng)
        tracker.offer(game)
        if tracker.out_of_time():
            return tracker.result()
