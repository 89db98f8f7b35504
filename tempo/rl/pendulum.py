"""Pendulum-v1 as tensor ops, with gymnasium's dynamics: a continuous-action tensor environment.

Same constants, the torque clipped to ``[-2, 2]`` (the action bounds, by
:class:`~tempo.rl.tensor_env.TensorEnv`), the same cost, the angular speed
clipped to ``[-8, 8]``, semi-implicit Euler in float64, observations
``(cos theta, sin theta, theta_dot)`` as float32, and truncation after 200
steps. It never terminates.
"""
from __future__ import annotations

import math

from tempo.api.functional import cat, cos, full, maximum, minimum, sin
from tempo.api.random import uniform
from tempo.api.rt import RecurrentTensor
from tempo.rl.tensor_env import TensorEnv
from tempo.symbolic.expr import Expr

RT = RecurrentTensor

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0


class Pendulum(TensorEnv):
    """Pendulum-v1: state ``(theta, theta_dot)``, one torque action in ``[-2, 2]``.

    The random initial state is uniform on ``[-pi, pi) x [-1, 1)`` per
    episode, from the context seed (``tpo.random``), so it differs from
    gymnasium's seeded reset; pass ``reset(initial_state=...)`` to start from
    given states.
    """

    state_shape = (2,)
    state_dtype = "float64"

    def __init__(self, name: str, dims: tuple[Expr, ...], max_episode_steps: int | None = 200, **options):
        super().__init__(name, dims, (3,), "float32", None, (1,), "float32", max_episode_steps,
                         action_low=-MAX_TORQUE, action_high=MAX_TORQUE, **options)

    def initial_state(self, dims: tuple[Expr, ...]) -> RT:
        theta = uniform((1,), dims=dims, low=-math.pi, high=math.pi, dtype="float64")
        theta_dot = uniform((1,), dims=dims, low=-1.0, high=1.0, dtype="float64")
        return cat([theta, theta_dot])

    def observe(self, state: RT) -> RT:
        theta, theta_dot = state.spatial[0], state.spatial[1]
        return cat([v.unsqueeze(0) for v in (cos(theta), sin(theta), theta_dot)]).cast("float32")

    def transition(self, state: RT, action: RT) -> tuple[RT, RT, RT]:
        theta, theta_dot = state.spatial[0], state.spatial[1]
        u = action.spatial[0].cast("float64")
        normalized = (theta + math.pi) % (2 * math.pi) - math.pi
        cost = normalized * normalized + 0.1 * (theta_dot * theta_dot) + 0.001 * (u * u)
        accel = 3 * GRAVITY / (2 * LENGTH) * sin(theta) + 3.0 / (MASS * LENGTH ** 2) * u
        theta_dot = minimum(maximum(theta_dot + accel * DT, -MAX_SPEED), MAX_SPEED)
        theta = theta + theta_dot * DT
        return cat([theta.unsqueeze(0), theta_dot.unsqueeze(0)]), -cost, full((), False, "bool")
