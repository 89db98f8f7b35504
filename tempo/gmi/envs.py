"""Vectorized gymnasium environments and the paper's policy sizes (Table 6)."""
from __future__ import annotations

import gymnasium as gym

from tempo.gmi.errors import GMIError

# Table 6: the locomotion benchmarks' policies are in:256:128:64:out
POLICY_HIDDEN = (256, 128, 64)


def make_envs(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` stepping together.

    Finished episodes reset in the same step, so every step's observation is
    the one the next action is taken from.
    """
    if num_envs < 1:
        raise GMIError(f"need at least one environment per instance, got {num_envs}")
    try:
        envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    except gym.error.Error as exc:
        raise GMIError(f"unknown environment {env_id!r}: {exc}") from None
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        raise GMIError(f"environment {env_id!r} has {envs.single_action_space}; "
                       f"tempo gmi trains discrete-action environments only")
    return envs
