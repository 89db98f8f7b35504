"""gymnasium's MuJoCo environments through tpo.rl.make (UDF path), against gymnasium stepped by hand."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl

pytest.importorskip("mujoco")


@pytest.mark.parametrize("name", ["HalfCheetah-v5", "Hopper-v5"])
def test_mujoco_env_steps_like_gymnasium_with_clipped_actions(name):
    rng = np.random.default_rng(0)
    with tpo.Context(seed=5) as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make(name, dims=(b, t))
        actions = rng.uniform(-1.5, 1.5, size=(2, 4, env.action_size)).astype(np.float32)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset()
        next_obs, r, d = env.step(tpo.from_numpy(actions, dims=(b, t)))
        o[b, t + 1] = next_obs
        first, obs, reward, done = ctx.run({B: 2, T: 4}, fetch=[o[b, 0], next_obs, r, d])
    for k in range(2):
        ref = gymnasium.make(name)
        start, _ = ref.reset(seed=env.reset_seed((k,)))
        np.testing.assert_array_equal(first[k], start)
        for step in range(4):
            o_ref, r_ref, terminated, truncated, _ = ref.step(np.clip(actions[k, step], -1.0, 1.0))
            np.testing.assert_array_equal(obs[k, step], o_ref)
            assert reward[k, step] == np.float32(r_ref) and done[k, step] == (terminated or truncated)
