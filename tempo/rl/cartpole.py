"""CartPole-v1 as tensor ops, with exactly gymnasium's dynamics.

Same constants, explicit Euler integration in float64 (observations are the
float64 state cast to float32, as gymnasium returns them), the same
termination thresholds, reward 1 per step including the terminating one,
and truncation after 500 steps. The expressions keep gymnasium's evaluation
order, so trajectories agree with gymnasium's bit for bit.
"""
from __future__ import annotations

import math

from tempo.api.functional import cat, cos, ones, sin, where
from tempo.api.random import uniform
from tempo.api.rt import RecurrentTensor
from tempo.rl.tensor_env import TensorEnv
from tempo.symbolic.expr import Expr

RT = RecurrentTensor

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
LENGTH = 0.5  # half the pole's length
POLE_MASS_LENGTH = MASS_POLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


class CartPole(TensorEnv):
    """CartPole-v1: state ``(x, x_dot, theta, theta_dot)``, actions 0 (push left) and 1 (push right).

    The random initial state is uniform on ``[-0.05, 0.05)`` per episode,
    from the context seed (``tpo.random``), so it differs from gymnasium's
    seeded reset; pass ``reset(initial_state=...)`` to start from given
    states.
    """

    state_shape = (4,)
    state_dtype = "float64"

    def __init__(self, name: str, dims: tuple[Expr, ...], max_episode_steps: int | None = 500, **options):
        super().__init__(name, dims, (4,), "float32", 2, (), "int64", max_episode_steps, **options)

    def initial_state(self, dims: tuple[Expr, ...]) -> RT:
        return uniform((4,), dims=dims, low=-0.05, high=0.05, dtype="float64")

    def observe(self, state: RT) -> RT:
        return state.cast("float32")

    def transition(self, state: RT, action: RT) -> tuple[RT, RT, RT]:
        x, x_dot, theta, theta_dot = (state.spatial[k] for k in range(4))
        force = where(action == 1, FORCE_MAG, -FORCE_MAG).cast("float64")
        costheta, sintheta = cos(theta), sin(theta)
        temp = (force + POLE_MASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASS_POLE * (costheta * costheta) / TOTAL_MASS))
        xacc = temp - POLE_MASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
        terminated = (x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD) | (theta > THETA_THRESHOLD)
        moved = cat([v.unsqueeze(0) for v in (x, x_dot, theta, theta_dot)])
        return moved, ones(()), terminated
