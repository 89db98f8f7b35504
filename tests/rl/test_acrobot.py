"""Acrobot-v1 as tensor ops against gymnasium's Acrobot-v1, step by step from the same states."""
from __future__ import annotations

import gymnasium
import numpy as np

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many

# the tensor Acrobot folds gymnasium's constants and reorders its sums: a step from the same state agrees to
# rounding, about 1e-12 at the largest speeds (values up to 9 pi)
STATE_TOL = 1e-11
HIGH = np.array([np.pi, np.pi, 4 * np.pi, 9 * np.pi])


def gym_step(state: np.ndarray, action: int):
    """gymnasium's Acrobot-v1 stepped once from ``state``: next state, observation, reward, terminated."""
    env = gymnasium.make("Acrobot-v1").unwrapped
    env.reset(seed=0)
    env.state = state.copy()
    obs, reward, terminated, _, _ = env.step(int(action))
    return env.state, obs, reward, terminated


def tip_height(state: np.ndarray) -> np.ndarray:
    return -np.cos(state[..., 0]) - np.cos(state[..., 1] + state[..., 0])


def test_a_step_matches_gymnasium_from_the_same_states():
    rng = np.random.default_rng(0)
    states = rng.uniform(-HIGH, HIGH, size=(600, 4))  # the whole state space: wraps, speed bounds, terminations
    actions = rng.integers(0, 3, size=600)
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("Acrobot-v1", dims=(b, t), impl="tensor")
        moved, reward, terminated = env.transition(tpo.from_numpy(states, dims=(b,)), tpo.from_numpy(actions, (b,)))
        got = ctx.run({B: len(states), T: 1}, fetch=[moved, env.observe(moved), reward, terminated])
    theirs = [gym_step(s, a) for s, a in zip(states, actions)]
    next_states, obs, rewards, ends = (np.array(x) for x in zip(*theirs))
    np.testing.assert_allclose(got[0], next_states, rtol=0, atol=STATE_TOL)
    np.testing.assert_allclose(got[1], obs, rtol=0, atol=1e-6)
    clear = np.abs(tip_height(next_states) - 1.0) > 1e-9  # not on the termination line to rounding
    np.testing.assert_array_equal(got[2][clear], rewards[clear])
    np.testing.assert_array_equal(got[3][clear], ends[clear])
    assert 0.05 < ends.mean() < 0.95
    assert (np.abs(next_states[:, 3]) == 9 * np.pi).any()  # a speed was bounded
    assert (np.abs(states[:, 0] + 0.2 * states[:, 2]) > 1.5 * np.pi).any()  # an angle wrapped


def test_trajectories_stay_on_gymnasium_s_step_for_step_through_termination():
    """The tensor state recurrence under a swinging policy, each step checked against gymnasium's from it."""
    rng = np.random.default_rng(1)
    initial = rng.uniform(-0.1, 0.1, size=(3, 4))
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("Acrobot-v1", dims=(b, t), impl="tensor")
        s = tpo.placeholder((4,), "float64", dims=(b, t))
        s[b, 0] = tpo.from_numpy(initial, dims=(b,))
        a = tpo.where(s.spatial[3] > 0, 2, 0).cast("int64")  # torque with the second joint's swing
        moved, reward, terminated = env.transition(s, a)
        s[b, t + 1] = moved
        states, next_states, actions, rewards, ends = ctx.run({B: 3, T: 200}, fetch=[s, moved, a, reward,
                                                                                      terminated])
    for k in range(3):
        for step in range(200):
            state, _, reward, end = gym_step(states[k, step], actions[k, step])
            np.testing.assert_allclose(next_states[k, step], state, rtol=0, atol=STATE_TOL)
            assert (rewards[k, step], ends[k, step]) == (reward, end)
        assert ends[k].any() and not ends[k].all()


def gym_episode(initial: np.ndarray, actions: np.ndarray):
    """obs, reward, done per step of gymnasium's Acrobot-v1 (TimeLimit included) under mask semantics."""
    env = gymnasium.make("Acrobot-v1")
    env.reset(seed=0)
    env.unwrapped.state = initial.copy()
    out, done, obs = [], False, None
    for action in actions:
        if not done:
            obs, reward, terminated, truncated, _ = env.step(int(action))
            done = terminated or truncated
            out.append((obs, reward, done))
        else:
            out.append((obs, 0.0, True))
    obs, reward, done = zip(*out)
    return np.stack(obs), np.array(reward, dtype=np.float32), np.array(done)


def swinging_actions(initial: np.ndarray, steps: int, swing: bool) -> np.ndarray:
    """Torque with the second joint's swing (the episode ends early) or with the first's (it runs to 500)."""
    env = gymnasium.make("Acrobot-v1").unwrapped
    env.reset(seed=0)
    env.state = initial.copy()
    actions = []
    for _ in range(steps):
        actions.append(2 if env.state[3 if swing else 2] > 0 else 0)
        env.step(actions[-1])
    return np.array(actions, dtype=np.int64)


def test_episodes_end_and_truncate_at_gymnasium_s_steps_with_masking_after():
    rng = np.random.default_rng(2)
    initial = rng.uniform(-0.1, 0.1, size=(3, 4)).astype(np.float32).astype(np.float64)
    steps = 505
    actions = np.stack([swinging_actions(s, steps, swing) for s, swing in zip(initial, (True, True, False))])
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("Acrobot-v1", dims=(b, t), impl="tensor")
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset(initial_state=initial)
        next_obs, reward, done = env.step(tpo.from_numpy(actions, dims=(b, t)))
        o[b, t + 1] = next_obs
        first, obs, rewards, dones = ctx.run({B: 3, T: steps}, fetch=[o[b, 0], next_obs, reward, done])
    assert env.obs_shape == (6,) and env.num_actions == 3
    for k in range(3):
        their_obs, their_rewards, their_dones = gym_episode(initial[k], actions[k])
        end = int(np.argmax(their_dones))
        np.testing.assert_allclose(obs[k], their_obs, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(rewards[k], their_rewards)
        np.testing.assert_array_equal(dones[k], their_dones)
        assert (obs[k, end:] == obs[k, end]).all() and (rewards[k, end + 1:] == 0).all()
    assert int(np.argmax(dones[0])) < 499 and rewards[0, int(np.argmax(dones[0]))] == 0.0  # terminated
    assert int(np.argmax(dones[2])) == 499 and rewards[2, :500].sum() == -500  # truncated by the time limit
    np.testing.assert_allclose(first[:, 0], np.cos(initial[:, 0]), atol=1e-6)


def test_autoresetting_rollouts_carry_over_and_restart_from_fresh_states():
    seen: dict[int, dict] = {}
    with tpo.Context(seed=3) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("Acrobot-v1", dims=(b, i, t), impl="tensor", autoreset=True, max_episode_steps=120)
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset()
        swing = tpo.where(tpo.eval_symbol(b) % 2 == 0, o.spatial[5], o.spatial[4])  # even b swing up
        a = tpo.where(swing > 0, 2, 0).cast("int64")
        step = env.step(a)
        o[b, i, t + 1] = step.obs
        ret, length = tempo.rl.episode_statistics(step.reward, step.done)
        parts = dict(obs=o, reward=step.reward, terminated=step.terminated, truncated=step.truncated,
                     final=step.final_obs, next=step.obs, ret=ret, length=length)
        sink_many({k: v[0:B, i, 0:T] for k, v in parts.items()},
                      lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: 4, I: 3, T: 100})
    got = {k: np.concatenate([seen[n][k] for n in range(3)], axis=1) for k in seen[0]}
    done = got["terminated"] | got["truncated"]
    assert got["terminated"].any() and got["truncated"].any()
    np.testing.assert_array_equal(got["next"][:, :-1], got["obs"][:, 1:])  # carried across rollout boundaries
    np.testing.assert_array_equal(got["next"][~done], got["final"][~done])
    fresh = got["next"][done]  # a fresh initial state in [-0.1, 0.1] after each end
    assert (fresh[:, [0, 2]] >= np.cos(0.1) - 1e-6).all() and (np.abs(fresh[:, [1, 3, 4, 5]]) <= 0.1).all()
    np.testing.assert_array_equal(got["reward"], np.where(got["terminated"], 0.0, -1.0))
    cos1, sin1, cos2, sin2 = (got["final"][..., k].astype(np.float64) for k in range(4))
    height = -cos1 - (cos1 * cos2 - sin1 * sin2)
    clear = np.abs(height - 1.0) > 1e-5
    np.testing.assert_array_equal(got["terminated"][clear], height[clear] > 1.0)
    for b in range(4):
        length, ret = 0, 0.0
        for k in range(got["obs"].shape[1]):
            length, ret = length + 1, ret + got["reward"][b, k]
            assert (got["length"][b, k], got["ret"][b, k]) == (length, ret)
            assert got["truncated"][b, k] == (length >= 120)
            length, ret = (0, 0.0) if done[b, k] else (length, ret)
