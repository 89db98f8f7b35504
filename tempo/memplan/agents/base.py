"""What every agent shares: a time budget, the best solution so far and its reward curve."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from tempo.memplan.game import DROP, GameState
from tempo.memplan.problem import Instance, Solution


@dataclass
class SearchResult:
    """The best complete solution an agent found, ``curve``: (seconds, best reward) points, and
    ``games``: (seconds, return) of every finished game (0 for a lost one), the agent's learning curve."""

    solution: Solution
    curve: list[tuple[float, float]] = field(default_factory=list)
    episodes: int = 0
    games: list[tuple[float, float]] = field(default_factory=list)


class Tracker:
    """Keeps the best complete solution and the reward curve within a time budget."""

    def __init__(self, inst: Instance, budget_seconds: float):
        self.inst = inst
        self.start = time.perf_counter()
        self.deadline = self.start + budget_seconds
        self.best: Solution | None = None
        self.curve: list[tuple[float, float]] = []
        self.games: list[tuple[float, float]] = []
        self.episodes = 0

    def elapsed(self) -> float:
        """Seconds since the search started."""
        return time.perf_counter() - self.start

    def out_of_time(self) -> bool:
        """Whether the budget is spent."""
        return time.perf_counter() >= self.deadline

    def offer(self, game: GameState) -> float:
        """Record a finished episode; returns its return (0 when the game was lost)."""
        self.episodes += 1
        if game.lost or not game.done:
            self.games.append((self.elapsed(), 0.0))
            return 0.0
        self.games.append((self.elapsed(), game.total))
        if self.best is None or game.total > self.best.reward:
            self.best = game.solution()
            self.curve.append((self.elapsed(), game.total))
        return game.total

    def offer_solution(self, sol: Solution) -> None:
        """Record a complete solution found outside the game (e.g. by the heuristic)."""
        self.episodes += 1
        self.games.append((self.elapsed(), sol.reward))
        if self.best is None or sol.reward > self.best.reward:
            self.best = sol
            self.curve.append((self.elapsed(), sol.reward))

    def result(self) -> SearchResult:
        """The best solution (all Drop when nothing complete was found) and the curve."""
        if self.best is None:
            game = GameState(self.inst)
            while not game.done:
                game.step(DROP)
            self.offer(game)
        return SearchResult(self.best, self.curve, self.episodes, self.games)
