"""Acrobot-v1 as tensor ops, with gymnasium's dynamics.

Same constants and the book's equations of motion (gymnasium's default
``book_or_nips="book"``), one fourth-order Runge-Kutta step of ``dt = 0.2``
in float64, the angles wrapped into ``[-pi, pi]`` and the angular speeds
bounded to ``4 pi`` and ``9 pi``, the torque ``-1``, ``0`` or ``+1`` for
actions 0, 1 and 2, reward -1 per step and 0 on the terminating one,
termination when the tip rises above the bar
(``-cos(theta1) - cos(theta2 + theta1) > 1``) and truncation after 500
steps. Observations
``(cos theta1, sin theta1, cos theta2, sin theta2, theta1_dot, theta2_dot)``
are computed in float64 and cast to float32, and carry no gradient (a
discrete action carries none, so nothing would flow through the dynamics;
the compiler need not differentiate them).

The equations are written for few NumPy calls per step rather than in
gymnasium's order of evaluation: the link constants folded into five
numbers, ``cos(x - pi / 2)`` as ``sin(x)``, the Runge-Kutta sum as
``dt/6 (k1 + k4) + dt/3 (k2 + k3)``. A step from the same state agrees with
gymnasium's to rounding (within about 1e-12 at the largest speeds, where the
values reach 28); a trajectory follows gymnasium's as long as the
double pendulum's chaos leaves such differences small.
"""
from __future__ import annotations

import math

from tempo.api.functional import cat, cos, maximum, minimum, sin, where
from tempo.api.random import uniform
from tempo.api.rt import RecurrentTensor
from tempo.rl.tensor_env import TensorEnv
from tempo.symbolic.expr import Expr

RT = RecurrentTensor

DT = 0.2  # seconds per step, one Runge-Kutta step
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5  # position of each link's centre of mass
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0  # moment of inertia of both links
GRAVITY = 9.8
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


# the book's equations of motion with the link constants folded: d1 = D1 + D1_COS cos(theta2),
# d2 = D2 + D2_COS cos(theta2), the speed terms scaled by CORIOLIS, and gravity's by G1 and G2
D1 = LINK_MASS_1 * LINK_COM_POS_1 ** 2 + LINK_MASS_2 * (LINK_LENGTH_1 ** 2 + LINK_COM_POS_2 ** 2) + 2 * LINK_MOI
D1_COS = LINK_MASS_2 * 2 * LINK_LENGTH_1 * LINK_COM_POS_2
D2 = LINK_MASS_2 * LINK_COM_POS_2 ** 2 + LINK_MOI
D2_COS = LINK_MASS_2 * LINK_LENGTH_1 * LINK_COM_POS_2
CORIOLIS = LINK_MASS_2 * LINK_LENGTH_1 * LINK_COM_POS_2
G1 = (LINK_MASS_1 * LINK_COM_POS_1 + LINK_MASS_2 * LINK_LENGTH_1) * GRAVITY
G2 = LINK_MASS_2 * LINK_COM_POS_2 * GRAVITY


def derivatives(theta1: RT, theta2: RT, dtheta1: RT, dtheta2: RT, torque: RT) -> tuple[RT, RT, RT, RT]:
    """The time derivative of the state under ``torque`` on the second joint (the book's equations)."""
    cos2, speed_scale = cos(theta2), -CORIOLIS * sin(theta2)
    minus_d1 = -D1 - D1_COS * cos2
    d2 = D2 + D2_COS * cos2
    ratio = d2 / minus_d1  # -d2 / d1
    phi2 = G2 * sin(theta1 + theta2)  # gymnasium's cos(theta1 + theta2 - pi / 2)
    phi1 = speed_scale * (dtheta2 * (dtheta2 + 2 * dtheta1)) + G1 * sin(theta1) + phi2
    ddtheta2 = (torque - ratio * phi1 + speed_scale * (dtheta1 * dtheta1) - phi2) / (D2 + d2 * ratio)
    ddtheta1 = (d2 * ddtheta2 + phi1) / minus_d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def runge_kutta(state: tuple[RT, ...], torque: RT, dt: float) -> tuple[RT, ...]:
    """One fourth-order Runge-Kutta step of :func:`derivatives` (gymnasium's ``rk4`` over ``[0, dt]``)."""
    half = dt / 2.0
    k1 = derivatives(*state, torque)
    k2 = derivatives(*(y + half * k for y, k in zip(state, k1)), torque)
    k3 = derivatives(*(y + half * k for y, k in zip(state, k2)), torque)
    k4 = derivatives(*(y + dt * k for y, k in zip(state, k3)), torque)
    return tuple(y + dt / 6.0 * (a + d) + dt / 3.0 * (b + c) for y, a, b, c, d in zip(state, k1, k2, k3, k4))


def wrap(x: RT, low: float, high: float) -> RT:
    """``x`` moved by whole turns ``high - low`` into ``[low, high]``, as gymnasium's ``wrap`` moves it (the
    same number for a move of one turn or none; for a value within a unit in the last place of ``high``,
    ``x - (x - low) // turn * turn`` may give ``low`` where gymnasium keeps ``high``, the same angle)."""
    turn = high - low
    return x - ((x - low) // turn) * turn


def bound(x: RT, low: float, high: float) -> RT:
    """``x`` clipped to ``[low, high]`` (gymnasium's ``bound``)."""
    return minimum(maximum(x, low), high)


class Acrobot(TensorEnv):
    """Acrobot-v1: state ``(theta1, theta2, theta1_dot, theta2_dot)``, actions 0, 1, 2 (torque -1, 0, +1).

    The random initial state is uniform on ``[-0.1, 0.1)`` per episode and
    rounded to float32 as gymnasium's is, drawn from the context seed
    (``tpo.random``), so it differs from gymnasium's seeded reset; pass
    ``reset(initial_state=...)`` to start from given states.
    """

    state_shape = (4,)
    state_dtype = "float64"

    def __init__(self, name: str, dims: tuple[Expr, ...], max_episode_steps: int | None = 500, **options):
        super().__init__(name, dims, (6,), "float32", 3, (), "int64", max_episode_steps, **options)

    def initial_state(self, dims: tuple[Expr, ...]) -> RT:
        return uniform((4,), dims=dims, low=-0.1, high=0.1, dtype="float64").cast("float32").cast("float64")

    def observe(self, state: RT) -> RT:
        theta1, theta2 = state.spatial[0], state.spatial[1]
        parts = (cos(theta1), sin(theta1), cos(theta2), sin(theta2), state.spatial[2], state.spatial[3])
        return cat([v.unsqueeze(0) for v in parts]).cast("float32").detach()

    def transition(self, state: RT, action: RT) -> tuple[RT, RT, RT]:
        torque = (action - 1).cast("float64")
        theta1, theta2, dtheta1, dtheta2 = runge_kutta(tuple(state.spatial[k] for k in range(4)), torque, DT)
        theta1, theta2 = wrap(theta1, -math.pi, math.pi), wrap(theta2, -math.pi, math.pi)
        dtheta1, dtheta2 = bound(dtheta1, -MAX_VEL_1, MAX_VEL_1), bound(dtheta2, -MAX_VEL_2, MAX_VEL_2)
        moved = cat([v.unsqueeze(0) for v in (theta1, theta2, dtheta1, dtheta2)])
        # termination reads the stepped state itself, so the whole step fuses into one island with the
        # policy (read from the angles alone, the speeds' part fuses apart and its inputs are stored per step)
        theta1, theta2 = moved.spatial[0], moved.spatial[1]
        terminated = -cos(theta1) - cos(theta2 + theta1) > 1.0
        return moved, where(terminated, 0.0, -1.0), terminated
