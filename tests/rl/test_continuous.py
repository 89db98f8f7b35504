"""Continuous actions: Box bounds on every Env, clipping when stepping, policy/space mismatches, Pendulum-v1."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl


def pendulum_rollout(impl: str, states: np.ndarray | None, actions: np.ndarray):
    """obs, reward, done of Pendulum-v1 (``impl``) for fixed actions shaped (B, T, 1)."""
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("Pendulum-v1", dims=(b, t), impl=impl)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset(initial_state=states) if states is not None else env.reset()
        next_obs, r, d = env.step(tpo.from_numpy(actions, dims=(b, t)))
        o[b, t + 1] = next_obs
        return env, ctx.run({B: actions.shape[0], T: actions.shape[1]}, fetch=[next_obs, r, d])


def gym_pendulum(state: np.ndarray, actions: np.ndarray):
    env = gymnasium.make("Pendulum-v1")
    env.reset(seed=0)
    env.unwrapped.state = state.copy()
    out = [env.step(a)[:3] for a in actions]
    return (np.stack([o for o, _, _ in out]), np.array([r for _, r, _ in out], np.float32),
            np.array([d for _, _, d in out]))


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_pendulum_exposes_its_box_bounds(impl):
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("Pendulum-v1", dims=(b, i, t), impl=impl)
    assert not env.is_discrete and env.action_shape == (1,) and env.action_size == 1
    assert isinstance(env.action_low, np.ndarray) and env.action_low.dtype == np.float32
    np.testing.assert_array_equal(env.action_low, [-2.0])
    np.testing.assert_array_equal(env.action_high, [2.0])
    assert env.action_space == "Box(-2.0, 2.0, (1,), float32)" and "Box(-2.0, 2.0" in repr(env)
    with pytest.raises(tpo.TempoError, match=r"continuous action space Box\(-2.0, 2.0.*env.action_size \(1\)"):
        env.num_actions


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_discrete_envs_give_their_range_as_bounds(impl):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, t), impl=impl)
    assert env.is_discrete and env.num_actions == 2 and env.action_space == "Discrete(2)"
    assert (env.action_low.tolist(), env.action_high.tolist(), env.action_low.dtype) == (0, 1, np.int64)


def test_halfcheetah_bounds_are_arrays():
    pytest.importorskip("mujoco")
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("HalfCheetah-v5", dims=(b, t))
    assert env.action_low.shape == (6,) and (env.action_low == -1).all() and (env.action_high == 1).all()
    assert (env.obs_shape, env.action_size) == ((17,), 6)


def test_tensor_pendulum_matches_gymnasium_and_both_clip_actions():
    rng = np.random.default_rng(0)
    states = rng.uniform([-np.pi, -1.0], [np.pi, 1.0], size=(2, 2))
    actions = rng.uniform(-5.0, 5.0, size=(2, 30, 1)).astype(np.float32)  # mostly outside [-2, 2]
    _, ours = pendulum_rollout("tensor", states, actions)
    for k in range(2):
        obs, reward, done = gym_pendulum(states[k], actions[k])
        np.testing.assert_allclose(ours[0][k], obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ours[1][k], reward, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(ours[2][k], done)
    clipped = np.clip(actions, -2.0, 2.0)
    _, at_bounds = pendulum_rollout("tensor", states, clipped)
    np.testing.assert_array_equal(at_bounds[0], ours[0])


def test_gymnasium_env_clips_actions_to_the_box():
    actions = np.random.default_rng(1).uniform(-6.0, 6.0, size=(2, 12, 1)).astype(np.float32)
    _, wild = pendulum_rollout("gymnasium", None, actions)
    _, clipped = pendulum_rollout("gymnasium", None, np.clip(actions, -2.0, 2.0))
    np.testing.assert_array_equal(wild[0], clipped[0])
    np.testing.assert_array_equal(wild[1], clipped[1])


def test_pendulum_truncates_after_200_steps():
    env, (_, _, done) = pendulum_rollout("tensor", None, np.zeros((1, 201, 1), np.float32))
    assert env.max_episode_steps == 200 and not done[0, :199].any() and done[0, 199:].all()


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_a_categorical_policy_on_a_box_space_is_an_error(impl):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("Pendulum-v1", dims=(b, t), impl=impl)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset()
        logits = tpo.nn.Linear(3, 4)(o)
        a = tpo.nn.Categorical(logits=logits).sample()
        with pytest.raises(tpo.TempoError, match=r"continuous action space Box\(-2.0, 2.0, \(1,\), float32\), but "
                                                 r"the action RT is int64: a discrete policy \(tpo.nn.Categorical\)"):
            env.step(a)
        with pytest.raises(tpo.TempoError, match=r"the action RT has shape \(4,\).*\(1,\) \(Box"):
            env.step(tpo.nn.Normal(logits, 1.0).sample())


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_a_normal_policy_on_a_discrete_space_is_an_error(impl):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, t), impl=impl)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset()
        mean = tpo.nn.Linear(4, 1)(o).squeeze(0)
        with pytest.raises(tpo.TempoError, match=r"discrete action space Discrete\(2\), but the action RT is "
                                                 r"float32: a continuous policy \(tpo.nn.Normal\)") as info:
            env.step(tpo.nn.Normal(mean, 1.0).sample())
    assert "test_continuous.py" in str(info.value)


def test_sizing_a_policy_by_num_actions_on_a_box_space_names_the_mistake():
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("Pendulum-v1", dims=(b, i, t))
        with pytest.raises(tpo.TempoError, match="Pendulum-v1 has a continuous action space.*tpo.nn.Normal"):
            tpo.nn.MLP(env.obs_size, [8], env.num_actions, dims=(i,))


def test_a_clipped_surrogate_ppo_on_a_box_space_compiles_runs_and_trains_its_log_std():
    """With a differentiable sample() this program was a ScheduleError; log_prob of the sample now trains."""
    epochs = 2
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("Pendulum-v1", dims=(b, i, t))
        actor = tpo.nn.MLP(env.obs_size, [16], env.action_size, dims=(i,), last_init_scale=0.01)
        head = tpo.nn.DiagGaussianHead(env.action_size, dims=(i,))
        critic = tpo.nn.MLP(env.obs_size, [16], 1, dims=(i,))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = head(actor(o))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        logp_old = dist.log_prob(a).sum(axis=-1).detach()
        advantage, target = tempo.rl.gae(r, critic(o).squeeze(0).detach(), d, 0.99, 0.95)
        k = (i // epochs) * epochs
        obs, act = o[0:B, k, 0:T], a[0:B, k, 0:T]
        new = head(actor(obs))
        loss = tempo.rl.ppo_clip_loss(new.log_prob(act).sum(axis=-1), logp_old[0:B, k, 0:T], advantage[0:B, k, 0:T],
                                      critic(obs).squeeze(-1), target[0:B, k, 0:T], new.entropy().sum(axis=-1),
                                      tempo.rl.alive(d)[0:B, k, 0:T], 0.2, 0.5, 0.0)
        loss.backward()
        tpo.optim.Adam(actor.parameters() + head.parameters() + critic.parameters(), lr=3e-3).step()
        actions, log_std = ctx.run(bounds={B: 2, I: 4, T: 30}, fetch=[a, head.log_std])
    assert np.isfinite(actions).all() and (np.abs(actions) > 2).any()  # sampled beyond the bounds, stepped clipped
    assert log_std[0, 0] == 0.0 and len(np.unique(log_std[:, 0])) == 4
