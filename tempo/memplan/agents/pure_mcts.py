"""The pure-MCTS ablation of Fig. 7: tree search over the true game dynamics, no learning.

Each move runs ``simulations`` descents from the current state with PUCT over
uniform priors on the legal actions, applying real moves and undoing them
afterwards. A new leaf is valued by a short rollout of the default policy
(place the buffer when it is legal, else Drop). The most visited action is
played. Drop-backup is the same as MMap-MuZero's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.agents.episode import Episode, finish_best_in_flight
from tempo.memplan.game import GameState
from tempo.memplan.problem import Instance


@dataclass(frozen=True)
class MCTSConfig:
    """Search effort per move."""

    simulations: int = 16
    rollout: int = 16
    exploration: float = 1.25


@dataclass
class _Node:
    visits: int = 0
    value: float = 0.0
    children: dict = field(default_factory=dict)   # action -> (reward, _Node)


def _default_action(legal: np.ndarray) -> int:
    return int(np.flatnonzero(legal)[0])


def _rollout(game: GameState, length: int) -> float:
    total, steps = 0.0, 0
    while not game.done and steps < length:
        total += game.step(_default_action(game.legal()))
        steps += 1
    for _ in range(steps + int(game.lost)):
        game.undo()
    return total


def _simulate(ep: Episode, node: _Node, cfg: MCTSConfig) -> float:
    game = ep.game
    if game.done:
        node.visits += 1
        return 0.0
    legal = np.flatnonzero(ep.legal())
    if node.visits == 0:
        node.visits, node.value = 1, _rollout(game, cfg.rollout)
        return node.value

    def score(a):
        if a not in node.children:
            return math.inf
        reward, child = node.children[a]
        q = reward + child.value / child.visits
        return q + cfg.exploration * math.sqrt(node.visits) / (1 + child.visits) / len(legal)

    action = int(max(legal, key=score))
    depth = game.index
    reward = game.step(action)
    lost = game.lost
    child = node.children.setdefault(action, (reward, _Node()))[1]
    if lost:
        child.visits += 1
    value = reward + (0.0 if lost else _simulate(ep, child, cfg))
    game.rewind(depth)
    node.visits += 1
    node.value += value
    return value


def solve(inst: Instance, budget_seconds: float, seed: int = 0,
          config: MCTSConfig = MCTSConfig()) -> SearchResult:
    """Pure MCTS episodes until the budget is spent; the best complete game wins."""
    tracker = Tracker(inst, budget_seconds)
    ep = Episode(inst)
    while not tracker.out_of_time():
        root = _Node()
        for _ in range(config.simulations):
            _simulate(ep, root, config)
        action = max(root.children, key=lambda a: root.children[a][1].visits)
        ep.game.step(action)
        ep.after_move()
        if ep.game.done:
            tracker.offer(ep.game)
            ep.start()
    finish_best_in_flight([ep], tracker)
    return tracker.result()
