"""The gymnasium environment: API conformance and the §4.3.1 observation."""
from __future__ import annotations

import numpy as np
from gymnasium.utils.env_checker import check_env
from memplan_instances import random_instance

from tempo.memplan.env import MMapGame
from tempo.memplan.features import MAP_SIZE
from tempo.memplan.validate import validate


def test_passes_gymnasium_checker():
    check_env(MMapGame(random_instance(1, steps=20)), skip_render_check=True)


def test_episode_returns_the_solution_reward_and_observations_track_the_state():
    env = MMapGame(random_instance(2, steps=30, alias_rate=0.0))
    obs, info = env.reset(seed=0)
    assert obs["memory_map"].shape == (MAP_SIZE, MAP_SIZE) and not obs["memory_map"].any()
    rng = np.random.default_rng(0)
    total, filled = 0.0, []
    done = False
    while not done:
        assert info["action_mask"][2]          # no alias groups: Drop is always legal
        np.testing.assert_array_equal(obs["actions"][:, 0], info["action_mask"])
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, reward, done, _, info = env.step(action)
        total += reward
        if not done:
            filled.append(obs["memory_map"].sum())
    assert not info["lost"]
    assert max(filled) > 0
    sol = env.game.solution()
    assert total == sol.reward
    validate(env.game.inst, sol)
