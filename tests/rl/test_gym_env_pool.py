"""A gymnasium environment pool holds one environment per episode of an iteration, whatever the
number of iterations: each iteration's resets run in its own step of the loop over iterations."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tempo.rl import gym_env

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reinforce.py")


def reinforce():
    spec = importlib.util.spec_from_file_location("reinforce_pool_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("iterations", [2, 5])
def test_the_pool_makes_at_most_one_environment_per_episode_of_an_iteration(iterations, monkeypatch):
    made = []
    make = gym_env._Episodes._make
    monkeypatch.setattr(gym_env._Episodes, "_make", lambda self: made.append(1) or make(self))
    module = reinforce()
    batch = 3
    module.main(module.Args(iterations=iterations, batch=batch, steps=12))
    assert 1 + len(made) <= batch  # the probe environment, then the pool's own
