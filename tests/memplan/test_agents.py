"""Agents: every solution they return is complete and valid, and search improves on its start."""
from __future__ import annotations

import numpy as np
import pytest
from memplan_instances import random_instance

from tempo.memplan.agents import get_agent
from tempo.memplan.agents.base import Tracker
from tempo.memplan.agents.episode import Episode
from tempo.memplan.agents.es import centred_ranks, play_preferences
from tempo.memplan.game import GameState
from tempo.memplan.validate import validate


@pytest.mark.parametrize("agent", ["random", "es", "es-linear"])
def test_search_agents_return_valid_solutions_and_monotone_curves(agent):
    inst = random_instance(5, steps=40)
    result = get_agent(agent)(inst, 1.0, 0)
    validate(inst, result.solution)
    rewards = [r for _, r in result.curve]
    assert rewards == sorted(rewards) and rewards[-1] == result.solution.reward
    assert result.episodes > 5
    assert len(result.games) == result.episodes
    assert max(r for _, r in result.games) == result.solution.reward
    times = [t for t, _ in result.games]
    assert times == sorted(times)


def test_centred_ranks():
    ranks = centred_ranks(np.array([3.0, -1.0, 10.0, 0.0]))
    np.testing.assert_allclose(ranks, [1 / 6, -0.5, 0.5, -1 / 6])


@pytest.mark.parametrize("agent", ["es", "es-linear"])
def test_es_beats_its_own_first_generation(agent):
    inst = random_instance(9, steps=60, alias_rate=0.3)
    result = get_agent(agent)(inst, 3.0, 1)
    first = result.curve[0][1]
    assert result.solution.reward > first


def test_action_preferences_play_complete_games_where_the_plain_game_is_lost():
    """§5.1 ES plays each buffer's preferred legal action; Drop-backup keeps those games complete."""
    inst = random_instance(3, steps=60, alias_rate=0.5)
    rng = np.random.default_rng(0)
    ep, plain, lost_plain = Episode(inst), GameState(inst), 0
    for _ in range(20):
        prefs = rng.normal(size=(len(inst.buffers), 3))
        tracker = Tracker(inst, 10.0)
        ret = play_preferences(ep, prefs, tracker)
        assert ep.game.done and not ep.game.lost
        validate(inst, tracker.best)
        assert ret == pytest.approx(tracker.best.reward)
        plain.reset()
        while not plain.done:
            plain.step(int(np.argmax(np.where(plain.legal(), prefs[plain.index], -np.inf))))
        lost_plain += plain.lost
    assert lost_plain > 0


def test_pure_mcts_over_true_dynamics_returns_a_valid_solution():
    inst = random_instance(12, steps=15, alias_rate=0.3)
    result = get_agent("mcts")(inst, 1.5, 0)
    validate(inst, result.solution)
    assert result.solution.reward > 0


@pytest.mark.slow
def test_hybrid_is_never_worse_than_the_heuristic():
    from tempo.memplan.agents.heuristic import heuristic_solution

    for seed in range(2):
        inst = random_instance(seed, steps=30, alias_rate=0.3)
        result = get_agent("hybrid")(inst, 20.0, seed)
        validate(inst, result.solution)
        assert result.solution.reward >= heuristic_solution(inst).reward
