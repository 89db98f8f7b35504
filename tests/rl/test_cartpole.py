"""CartPole-v1 as tensor ops against gymnasium's CartPole-v1, step by step, bit for bit."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl


def controller(obs: np.ndarray) -> np.ndarray:
    """A linear controller that balances the pole (float32 math, as in the Tempo program)."""
    return (obs[..., 0] * np.float32(0.1) + obs[..., 1] * np.float32(0.5) + obs[..., 2] * np.float32(3.0)
            + obs[..., 3] > 0).astype(np.int64)


def gym_rollout(initial_state: np.ndarray, steps: int, actions: np.ndarray | None = None):
    """obs, reward, done per step of gymnasium's CartPole-v1 under mask semantics."""
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    env.unwrapped.state = initial_state.copy()
    obs = initial_state.astype(np.float32)
    out, done = [], False
    for k in range(steps):
        if done:
            out.append((obs, 0.0, True))
            continue
        action = int(actions[k]) if actions is not None else int(controller(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
        out.append((obs, reward, done))
    obs, reward, done = zip(*out)
    return np.stack(obs), np.array(reward, dtype=np.float32), np.array(done)


def tempo_rollout(initial_states: np.ndarray, steps: int, actions: np.ndarray | None = None):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, t), impl="tensor")
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset(initial_state=initial_states)
        if actions is None:
            a = (o.spatial[0] * 0.1 + o.spatial[1] * 0.5 + o.spatial[2] * 3.0 + o.spatial[3] > 0).cast("int64")
        else:
            a = tpo.from_numpy(actions, dims=(b, t))
        next_obs, r, d = env.step(a)
        o[b, t + 1] = next_obs
        return ctx.run({B: len(initial_states), T: steps}, fetch=[next_obs, r, d])


def assert_same(ours, theirs):
    for x, y, what in zip(ours, theirs, ("obs", "reward", "done")):
        np.testing.assert_array_equal(x, y, err_msg=what)


def test_random_actions_match_gymnasium_through_termination_and_masking():
    rng = np.random.default_rng(1)
    states = rng.uniform(-0.05, 0.05, size=(3, 4))
    actions = (rng.random((3, 60)) < 0.7).astype(np.int64)  # pushes right more often: the pole falls
    ours = tempo_rollout(states, 60, actions)
    for k in range(3):
        theirs = gym_rollout(states[k], 60, actions[k])
        assert theirs[2].any() and not theirs[2].all()  # the episode ends inside the window
        assert_same([x[k] for x in ours], theirs)


def test_a_balancing_policy_is_truncated_after_500_steps_like_gymnasium():
    state = np.array([[0.03, -0.02, 0.04, 0.01]])
    ours = tempo_rollout(state, 505)
    theirs = gym_rollout(state[0], 505)
    assert_same([x[0] for x in ours], theirs)
    assert not ours[2][0, :499].any() and ours[2][0, 499:].all()
    assert ours[1][0, :500].sum() == 500 and ours[1][0, 500:].sum() == 0


def test_after_the_end_the_last_observation_repeats_with_reward_zero():
    obs, reward, done = tempo_rollout(np.array([[0.0, 0.0, 0.2, 0.0]]), 12, np.zeros((1, 12), np.int64))
    end = int(np.argmax(done[0]))
    assert 0 < end < 11 and reward[0, end] == 1.0
    assert (obs[0, end:] == obs[0, end]).all() and (reward[0, end + 1:] == 0).all() and done[0, end:].all()


def test_random_initial_states_are_deterministic_per_seed_and_episode():
    def first_obs(seed):
        with tpo.Context(seed=seed) as ctx:
            (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
            env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl="tensor")
            return ctx.run({B: 3, I: 2}, fetch=[env.reset()])[0]

    a, again, other = first_obs(0), first_obs(0), first_obs(1)
    np.testing.assert_array_equal(a, again)
    assert a.shape == (3, 2, 4) and np.abs(a).max() <= 0.05
    assert len(np.unique(a.reshape(6, 4), axis=0)) == 6 and not np.array_equal(a, other)


@pytest.mark.parametrize("bad, message", [
    (np.zeros((2, 3)), r"initial_state must be shaped"),
    (np.zeros((2, 2, 2, 4)), r"at most 2 leading axes"),
])
def test_bad_initial_states_are_named(bad, message):
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl="tensor")
        with pytest.raises(tpo.TempoError, match=message):
            env.reset(initial_state=bad)
