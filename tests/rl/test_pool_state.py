"""A gymnasium environment pickled by tempo.rl.pool_state steps on as the original does, bit for bit."""
from __future__ import annotations

import pickle

import gymnasium
import numpy as np
import pytest

from tempo.rl.pool_state import pickled


def advanced(env_id: str, steps: int) -> gymnasium.Env:
    env = gymnasium.make(env_id)
    env.reset(seed=3)
    env.action_space.seed(4)
    for _ in range(steps):
        env.step(env.action_space.sample())
    return env


def trajectory(env: gymnasium.Env, actions: list) -> list[np.ndarray]:
    """Observations, rewards and flags of ``actions``, resetting (unseeded) where an episode ends."""
    out = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        out += [np.asarray(obs), np.asarray([reward, terminated, truncated])]
        if terminated or truncated:
            out.append(np.asarray(env.reset()[0]))
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5"])
def test_a_pickled_environment_steps_on_as_the_original(env_id):
    if env_id.startswith("HalfCheetah"):
        pytest.importorskip("mujoco")
    env = advanced(env_id, 150)  # Pendulum's time limit (200 steps) ends its episode 50 steps on
    copy = pickle.loads(pickled(env))
    actions = [env.action_space.sample() for _ in range(250)]
    ours, theirs = trajectory(env, actions), trajectory(copy, actions)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    assert copy.get_wrapper_attr("_elapsed_steps") == env.get_wrapper_attr("_elapsed_steps")


def test_plain_pickling_restarts_a_mujoco_environment():
    """Why MuJoCo environments are pickled by their attributes: gymnasium's EzPickle rebuilds them fresh."""
    pytest.importorskip("mujoco")
    env = advanced("HalfCheetah-v5", 20)
    plain = pickle.loads(pickle.dumps(env))
    assert not np.array_equal(plain.unwrapped.data.qpos, env.unwrapped.data.qpos)
    np.testing.assert_array_equal(pickle.loads(pickled(env)).unwrapped.data.qpos, env.unwrapped.data.qpos)
