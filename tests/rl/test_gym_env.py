"""Gymnasium environments through UDF ops, against gymnasium run by hand."""
from __future__ import annotations

import re

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl


def cartpole_program(seed: int, bounds: dict):
    """A pole-angle policy on gymnasium's CartPole-v1 over (b, i, t)."""
    with tpo.Context(seed=seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        next_obs, r, d = env.step((o.spatial[2] > 0).cast("int64"))
        o[b, i, t + 1] = next_obs
        out = ctx.run({B: bounds["B"], I: bounds["I"], T: bounds["T"]}, fetch=[o, next_obs, r, d])
        return env, ctx, out


def by_hand(seed: int, steps: int):
    """The same policy on gymnasium directly, under mask semantics."""
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    first, out, done = obs, [], False
    for _ in range(steps):
        if not done:
            obs, reward, terminated, truncated, _ = env.step(int(obs[2] > 0))
            done = terminated or truncated
        else:
            reward = 0.0
        out.append((obs, reward, done))
    obs, reward, done = zip(*out)
    return first, np.stack(obs), np.array(reward, np.float32), np.array(done)


def test_episodes_match_gymnasium_with_per_episode_seeds():
    env, _, (o, next_obs, r, d) = cartpole_program(seed=3, bounds={"B": 2, "I": 2, "T": 60})
    assert o.shape == (2, 2, 60, 4) and r.dtype == np.float32 and d.dtype == bool
    ends = 0
    for key in np.ndindex(2, 2):
        first, obs, reward, done = by_hand(env.reset_seed(key), 60)
        np.testing.assert_array_equal(o[key][0], first)
        np.testing.assert_array_equal(o[key][1:], obs[:-1])
        np.testing.assert_array_equal(next_obs[key], obs)
        np.testing.assert_array_equal(r[key], reward)
        np.testing.assert_array_equal(d[key], done)
        ends += done[-1]
    assert ends >= 2  # the mask semantics were exercised
    seeds = {env.reset_seed(k) for k in np.ndindex(2, 2)}
    assert len(seeds) == 4


def test_episodes_that_end_hand_their_environments_back_when_their_dim_ends_at_run_time():
    with tpo.Context(seed=1) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        o[b, i, t + 1], r, d = env.step((o.spatial[2] > 0).cast("int64"))
        tpo.end_when(d[0:B, i, t])
        program = ctx.compile(fetch=[r[0:B, i, 0:T].sum(axis=1)])
    (returns,) = program.run({B: 3, I: 4, T: 200})
    for key in np.ndindex(3, 4):
        _, _, reward, _ = by_hand(env.reset_seed(key), 200)
        assert returns[key[1], key[0]] == reward.sum()
    assert (program.lengths["T"] < 200).all()
    host = env._host  # every episode ended before T - 1: each handed its environment back then
    assert host.running and all(e.env is None for e in host.running.values())
    assert len(host.free) >= 3


def test_reset_seeds_follow_the_context_seed():
    env3, _, out3 = cartpole_program(seed=3, bounds={"B": 1, "I": 1, "T": 2})
    env4, _, out4 = cartpole_program(seed=4, bounds={"B": 1, "I": 1, "T": 2})
    assert env3.reset_seed((0, 0)) != env4.reset_seed((0, 0))
    assert not np.array_equal(out3[0][0, 0, 0], out4[0][0, 0, 0])
    _, _, again = cartpole_program(seed=3, bounds={"B": 1, "I": 1, "T": 2})
    np.testing.assert_array_equal(out3[0], again[0])


def udf_fn(ctx, label: str):
    return next(n.op.fn for n in ctx.sdg.nodes.values() if getattr(n.op, "label", None) == label)


def test_the_udfs_take_a_leading_batch_axis_of_episodes():
    _, ctx, _ = cartpole_program(seed=0, bounds={"B": 1, "I": 1, "T": 1})
    reset, step = udf_fn(ctx, "CartPole-v1.reset"), udf_fn(ctx, "CartPole-v1.step")
    keys = np.array([[0, 5], [1, 5], [2, 5]])
    obs, done = reset(keys)
    assert obs.shape == (3, 4) and done.shape == (3,) and not done.any()
    for k, row in enumerate(keys):
        single, _ = reset(row)
        np.testing.assert_array_equal(single, obs[k])
    reset(keys)
    obs1, reward, done = step(keys, np.int64(3), np.array([0, 1, 1]), np.array([False, False, True]))
    assert obs1.shape == (3, 4) and reward.tolist() == [1.0, 1.0, 0.0] and done.tolist() == [False, False, True]
    np.testing.assert_array_equal(obs1[2], obs[2])  # an ended episode repeats its observation


def test_box_actions_and_discrete_observations():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        pendulum = tempo.rl.make("Pendulum-v1", dims=(b, t))
        lake = tempo.rl.make("FrozenLake-v1", dims=(b, t), is_slippery=False)
        assert (pendulum.is_discrete, pendulum.action_shape, pendulum.obs_shape) == (False, (1,), (3,))
        assert (lake.num_actions, lake.obs_shape, lake.obs_dtype) == (4, (), "int64")
        _, r_pendulum, _ = pendulum.step(tpo.full((1,), 0.5))
        lake_obs, r_lake, _ = lake.step(tpo.full((), 2, "int64"))  # always right: never reaches the goal
        lake_obs, r_pendulum, r_lake = ctx.run({B: 2, T: 5}, fetch=[lake_obs, r_pendulum, r_lake])
    assert (r_pendulum < 0).all() and (r_lake == 0).all()
    assert lake_obs[0].tolist() == [1, 2, 3, 3, 3]


def test_suggestions_name_each_environment_once():
    """CartPole-v1 is both a gymnasium id and a tensor environment: suggested once."""
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError) as err:
            tempo.rl.make("CartPole-v2", dims=(b, t))
    suggested = re.search(r"did you mean (.*)\?\)", str(err.value)).group(1).split(", ")
    assert "'CartPole-v1'" in suggested and len(suggested) == len(set(suggested))


def test_unknown_names_suggest_close_matches():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError, match=r"unknown environment 'CartPol-v1' \(did you mean 'CartPole-v1'"):
            tempo.rl.make("CartPol-v1", dims=(b, t))
        with pytest.raises(tpo.TempoError, match=r"no tensor implementation of 'MountainCar-v0'.*CartPole-v1"):
            tempo.rl.make("MountainCar-v0", dims=(b, t), impl="tensor")
        with pytest.raises(tpo.TempoError, match=r"impl='jax' is not one of"):
            tempo.rl.make("CartPole-v1", dims=(b, t), impl="jax")
        with pytest.raises(tpo.TempoError, match=r"gymnasium.make\('CartPole-v1'\) failed: TypeError"):
            tempo.rl.make("CartPole-v1", dims=(b, t), gravity=3.0)


def test_bad_dims_and_actions_are_named():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError, match=r"follow the context's dim order \(b, t\)"):
            tempo.rl.make("CartPole-v1", dims=(t, b))
        with pytest.raises(tpo.TempoError, match=r"needs a batch dim and a time dim"):
            tempo.rl.make("CartPole-v1", dims=(t,))
        env = tempo.rl.make("CartPole-v1", dims=(b, t))
        with pytest.raises(tpo.TempoError, match=r"initial_state needs impl='tensor'"):
            env.reset(initial_state=np.zeros(4))
        with pytest.raises(tpo.TempoError, match=r"discrete action space Discrete\(2\), but the action RT is float32"):
            env.step(tpo.full((), 1.0))
        with pytest.raises(tpo.TempoError, match=r"shape \(2,\), the environment takes actions of shape \(\)"):
            env.step(tpo.full((2,), 1, "int64"))
        env.step(tpo.full((), 1, "int64"))
        with pytest.raises(tpo.TempoError, match=r"env.step was already called"):
            env.step(tpo.full((), 1, "int64"))
