"""``tempo/Synthetic-v0``: a cheap environment with observations of any shape.

Made for memory experiments (as in TEMPO §7.3, up to 3x256x256 images): the
observation is a real array of ``obs_shape`` at every step, while the
dynamics cost a few scalar ops. The hidden state is a class ``s`` in
``[0, num_actions)``; the observation is a fixed pattern scaled by
``(s + 1) / num_actions``, so it reveals ``s``; the action ``a`` earns reward
1 when ``a == s`` (else 0) and moves the state to ``(s + a + 1) %
num_actions``. A policy that reads ``s`` off the observation earns 1 per step.
"""
from __future__ import annotations

import math

import numpy as np

from tempo.api.functional import from_numpy, full
from tempo.api.random import uniform
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.rl.tensor_env import TensorEnv
from tempo.symbolic.expr import Expr

RT = RecurrentTensor


class Synthetic(TensorEnv):
    """``make("tempo/Synthetic-v0", dims, obs_shape=(3, 64, 64), num_actions=4, episode_length=200)``.

    Episodes are truncated after ``episode_length`` steps (None: never).
    """

    state_shape = ()
    state_dtype = "int64"

    def __init__(self, name: str, dims: tuple[Expr, ...], obs_shape=(3, 64, 64), num_actions: int = 4,
                 episode_length: int | None = 200, **options):
        obs_shape = tuple(obs_shape) if isinstance(obs_shape, (tuple, list)) else (obs_shape,)
        if not obs_shape or any(not isinstance(s, int) or s < 1 for s in obs_shape):
            raise TempoError(f"{name}: obs_shape must be a tuple of positive ints, got {obs_shape!r}", user_site())
        if not isinstance(num_actions, int) or num_actions < 1:
            raise TempoError(f"{name}: num_actions must be a positive int, got {num_actions!r}", user_site())
        super().__init__(name, dims, obs_shape, "float32", num_actions, (), "int64", episode_length, **options)
        size = math.prod(obs_shape)
        self.pattern = (0.75 + 0.25 * np.cos(np.arange(size))).reshape(obs_shape).astype(np.float32)

    def initial_state(self, dims: tuple[Expr, ...]) -> RT:
        u = uniform((), dims=dims, dtype="float64")
        return (u * self.num_actions).cast("int64")

    def observe(self, state: RT) -> RT:
        return from_numpy(self.pattern) * ((state + 1).cast("float32") / self.num_actions)

    def transition(self, state: RT, action: RT) -> tuple[RT, RT, RT]:
        reward = (action == state).cast("float32")
        return (state + action + 1) % self.num_actions, reward, full((), False, "bool")
