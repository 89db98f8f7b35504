"""envpool as a vector-env backend (impl="envpool"): against envpool stepped by hand, same seeds and masks."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.rl

envpool = pytest.importorskip("envpool")


def cartpole(impl: str, batch: int, iterations: int, steps: int, seed: int = 0):
    """A controller that balances badly on CartPole-v1 over (b, i, t); obs, reward, done and the env."""
    with tpo.Context(seed=seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl=impl)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        a = (o.spatial[2] * 3.0 + o.spatial[3] < 0.0).cast("int64")  # pushes the wrong way: the pole falls
        next_obs, r, d = env.step(a)
        o[b, i, t + 1] = next_obs
        return env, ctx.run({B: batch, I: iterations, T: steps}, fetch=[o[b, i, 0], next_obs, r, d])


def tensor_cartpole(first: np.ndarray, steps: int):
    """The same policy on Tempo's CartPole-v1 tensor environment, from the given first observations."""
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, t), impl="tensor")
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset(initial_state=first.astype(np.float64))
        a = (o.spatial[2] * 3.0 + o.spatial[3] < 0.0).cast("int64")
        next_obs, r, d = env.step(a)
        o[b, t + 1] = next_obs
        return ctx.run({B: len(first), T: steps}, fetch=[next_obs, r, d])


def test_cartpole_through_envpool_follows_cartpole_with_masks_across_iterations():
    env, (first, obs, reward, done) = cartpole("envpool", batch=3, iterations=2, steps=40)
    assert done[:, :, -1].all() and not done[:, :, 0].any()  # every episode ends inside the 40 steps
    assert len(np.unique(first[..., 0])) == 6  # every episode starts from its own reset
    flat = first.reshape(6, 4)
    ref_obs, ref_reward, ref_done = tensor_cartpole(flat, 40)
    np.testing.assert_array_equal(done.reshape(6, 40), ref_done)
    np.testing.assert_array_equal(reward.reshape(6, 40), ref_reward)
    np.testing.assert_allclose(obs.reshape(6, 40, 4), ref_obs, rtol=1e-4, atol=1e-5)


def test_envpool_runs_are_reproducible_and_follow_the_seed():
    _, one = cartpole("envpool", 2, 1, 10)
    _, again = cartpole("envpool", 2, 1, 10)
    _, other = cartpole("envpool", 2, 1, 10, seed=1)
    np.testing.assert_array_equal(one[0], again[0])
    assert not np.array_equal(one[0], other[0])


def test_envpool_clips_box_actions_and_reports_bounds():
    actions = np.random.default_rng(0).uniform(-6.0, 6.0, size=(2, 8, 1)).astype(np.float32)

    def run(acts):
        with tpo.Context() as ctx:
            (b, B), (t, T) = ctx.dims("b", "t")
            env = tempo.rl.make("Pendulum-v1", dims=(b, t), impl="envpool")
            o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
            o[b, 0] = env.reset()
            next_obs, r, _ = env.step(tpo.from_numpy(acts, dims=(b, t)))
            o[b, t + 1] = next_obs
            return env, ctx.run({B: 2, T: 8}, fetch=[next_obs, r])

    env, wild = run(actions)
    _, clipped = run(np.clip(actions, -2.0, 2.0))
    assert env.action_space == "Box(-2.0, 2.0, (1,), float32)" and env.max_episode_steps == 200
    np.testing.assert_array_equal(wild[0], clipped[0])
    np.testing.assert_array_equal(wild[1], clipped[1])


def test_halfcheetah_steps_through_envpool():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("HalfCheetah-v5", dims=(b, t), impl="envpool")
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset()
        next_obs, r, d = env.step(tpo.full((6,), 0.5))
        o[b, t + 1] = next_obs
        obs, reward = ctx.run({B: 2, T: 5}, fetch=[next_obs, r])
    assert env.obs_shape == (17,) and obs.shape == (2, 5, 17) and np.isfinite(obs).all()
    assert len(np.unique(reward)) > 1


def test_an_environment_envpool_lacks_is_named():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError, match=r"envpool has no environment 'CartPol-v1' \(did you mean "
                                                 r"'CartPole-v1'.*impl='gymnasium'"):
            tempo.rl.make("CartPol-v1", dims=(b, t), impl="envpool")
        with pytest.raises(tpo.TempoError, match=r"envpool.make\('CartPole-v1'\) failed"):
            tempo.rl.make("CartPole-v1", dims=(b, t), impl="envpool", gravity_typo=3.0)


def test_envpool_has_no_per_episode_reset_seeds():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, t), impl="envpool")
        with pytest.raises(tpo.TempoError, match="envpool ignores per-episode reset seeds"):
            env.reset_seed((0,))
