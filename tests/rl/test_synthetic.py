"""tempo/Synthetic-v0 against a NumPy model of its dynamics; observation sizes up to 3x256x256."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.rl


def rollout(obs_shape, num_actions, episode_length, steps, actions=None, batch=2, seed=0):
    """Runs the env with given actions (an array over (b, t)) or the policy that reads the state."""
    with tpo.Context(seed=seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), obs_shape=obs_shape, num_actions=num_actions,
                            episode_length=episode_length)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        if actions is None:
            corner = o.spatial[(0,) * len(obs_shape)]  # pattern 1.0 here: the value is (s + 1) / num_actions
            a = (corner * num_actions - 0.5).cast("int64")
        else:
            a = tpo.from_numpy(actions, dims=(b, t))
        next_obs, r, d = env.step(a)
        o[b, i, t + 1] = next_obs
        out = ctx.run({B: batch, I: 1, T: steps}, fetch=[o, r, d])
    return env, [x[:, 0] for x in out]


def model(s0, actions, num_actions, episode_length):
    """The documented dynamics, with mask semantics: states before each step, rewards, dones."""
    s, states, rewards, dones, done = s0, [], [], [], False
    for k, a in enumerate(actions):
        states.append(s)
        if done:
            rewards.append(0.0)
        else:
            rewards.append(float(a == s))
            s = (s + a + 1) % num_actions
            done = k + 1 >= episode_length
        dones.append(done)
    return np.array(states), np.array(rewards, np.float32), np.array(dones)


def test_dynamics_match_the_numpy_model():
    actions = np.random.default_rng(0).integers(0, 5, size=(2, 9))
    env, (obs, reward, done) = rollout((3, 4, 4), 5, 6, 9, actions)
    assert obs.shape == (2, 9, 3, 4, 4) and obs.dtype == np.float32 and env.obs_size == 48
    for k in range(2):
        s0 = int(round(obs[k, 0, 0, 0, 0] * 5)) - 1
        states, ref_reward, ref_done = model(s0, actions[k], 5, 6)
        np.testing.assert_allclose(obs[k], env.pattern * ((states[:, None, None, None] + 1) / 5), rtol=1e-6)
        np.testing.assert_array_equal(reward[k], ref_reward)
        np.testing.assert_array_equal(done[k], ref_done)


def test_a_policy_that_reads_the_observation_earns_one_per_step():
    _, (_, reward, done) = rollout((3, 8, 8), 4, 10, 12, batch=3)
    assert (reward[:, :10] == 1).all() and (reward[:, 10:] == 0).all()
    assert not done[:, :9].any() and done[:, 9:].all()
    _, (_, random_reward, _) = rollout((3, 8, 8), 4, 10, 12, np.zeros((3, 12), np.int64), batch=3)
    assert random_reward.sum() < reward.sum()


def test_large_observations():
    env, (obs, _, _) = rollout((3, 256, 256), 4, None, 2, batch=1)
    assert obs.shape == (1, 2, 3, 256, 256) and env.max_episode_steps is None
    assert np.unique(obs[0, 0]).size > 1  # a real image, not a constant


@pytest.mark.parametrize("kwargs, message", [
    ({"obs_shape": (3, 0)}, r"obs_shape must be a tuple of positive ints"),
    ({"num_actions": 0}, r"num_actions must be a positive int, got 0"),
    ({"episode_length": -1}, r"max_episode_steps must be a positive int or None"),
])
def test_bad_parameters_are_named(kwargs, message):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError, match=message):
            tempo.rl.make("tempo/Synthetic-v0", dims=(b, t), **kwargs)
        with pytest.raises(tpo.TempoError, match=r"exists only as a tensor environment"):
            tempo.rl.make("tempo/Synthetic-v0", dims=(b, t), impl="gymnasium")
