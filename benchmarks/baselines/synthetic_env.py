"""``tempo/Synthetic-v0``'s dynamics as batched array ops, for the torch and JAX baselines.

The same dynamics as :mod:`tempo.rl.synthetic` and the mask semantics of
:mod:`tempo.rl.tensor_env`, written once with operators that torch tensors
and JAX arrays share; ``xp`` is ``torch`` or ``jax.numpy`` (for ``where``).

- the hidden state is a class ``s`` in ``[0, num_actions)``, uniform at reset;
- the observation is ``pattern(obs_shape) * (s + 1) / num_actions``;
- action ``a`` earns 1 when ``a == s`` (else 0) and moves ``s`` to ``(s + a + 1) % num_actions``;
- the transition at step ``t >= episode_length - 1`` ends the episode; after
  the end the state stays, rewards are 0 and ``done`` stays true.
"""
from __future__ import annotations

import math

import numpy as np


def pattern(obs_shape: tuple[int, ...]) -> np.ndarray:
    """The fixed observation pattern (1.0 at index 0), as ``env.pattern`` of Tempo's environment."""
    size = math.prod(obs_shape)
    return (0.75 + 0.25 * np.cos(np.arange(size))).reshape(obs_shape).astype(np.float32)


def observe(pattern, state, num_actions: int):
    """Observations ``(num_envs, *obs_shape)`` of the states ``(num_envs,)``; ``pattern`` is a framework array."""
    scale = (state + 1) / num_actions
    return pattern * scale.reshape((-1,) + (1,) * pattern.ndim)


def step(xp, state, ended, action, t, num_actions: int, episode_length: int):
    """One step of every environment: ``(next_state, reward, done)``.

    ``ended`` says which episodes ended before this step (all false at
    ``t = 0``); the next step's ``ended`` is this step's ``done``.
    """
    reward = xp.where(ended, 0.0, (action == state) * 1.0)
    next_state = xp.where(ended, state, (state + action + 1) % num_actions)
    done = ended | (t >= episode_length - 1)
    return next_state, reward, done
