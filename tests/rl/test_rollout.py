"""Persistent, autoresetting environments carried across rollouts, against hand-written NumPy loops."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many


def angle_policy(o):
    return (o.spatial[2] > 0).cast("int64")


def rollout_program(impl: str, bounds: dict, every: int = 1, **make_kwargs):
    """The pole-angle policy over (b, i, t), collecting each rollout's transitions through a sink."""
    seen: dict[int, dict] = {}
    with tpo.Context(seed=5) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl=impl, autoreset=True, rollout_every=every,
                            **make_kwargs)
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset()
        a = angle_policy(o)
        step = env.step(a)
        o[b, i, t + 1] = step.obs
        ret, length = tempo.rl.episode_statistics(step.reward, step.done, every=every)
        at = (i % every) == 0
        parts = dict(obs=o, action=a, reward=step.reward, terminated=step.terminated, truncated=step.truncated,
                     final=step.final_obs, next=step.obs, ret=ret, length=length)
        sink_many({k: v[0:B, i, 0:T][at] for k, v in parts.items()},
                  lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: bounds["B"], I: bounds["I"], T: bounds["T"]})
    return env, [seen[k] for k in sorted(seen)]


def by_hand(seeds: list[int], steps: int, limit: int):
    """Gymnasium's CartPole stepped env by env, resetting (unseeded) right after an episode ends."""
    rows = []
    for seed in seeds:
        env = gymnasium.make("CartPole-v1", max_episode_steps=limit)
        obs, _ = env.reset(seed=seed)
        out, ret, length = [], 0.0, 0
        for _ in range(steps):
            before = obs
            final, reward, terminated, truncated, _ = env.step(int(obs[2] > 0))
            ret, length = ret + reward, length + 1
            out.append((before, reward, terminated, truncated, final, ret, length))
            obs = final
            if terminated or truncated:
                obs, _ = env.reset()
                ret, length = 0.0, 0
        rows.append(out)
    return rows


@pytest.mark.parametrize("every", [1, 3])
def test_gymnasium_rollouts_continue_where_the_last_one_stopped(every):
    env, rollouts = rollout_program("gymnasium", {"B": 3, "I": 3 * every, "T": 25}, every,
                                    max_episode_steps=30)
    assert len(rollouts) == 3  # acting ran at the rollouts' points only
    reference = by_hand([env.reset_seed(b) for b in range(3)], 75, 30)
    for b in range(3):
        obs, reward, terminated, truncated, final, ret, length = map(np.array, zip(*reference[b]))
        got = {k: np.concatenate([r[k][b] for r in rollouts]) for k in rollouts[0]}
        np.testing.assert_array_equal(got["obs"], obs.astype(np.float32))
        np.testing.assert_array_equal(got["reward"], reward.astype(np.float32))
        np.testing.assert_array_equal(got["terminated"], terminated)
        np.testing.assert_array_equal(got["truncated"], truncated)
        np.testing.assert_array_equal(got["final"], final.astype(np.float32))
        np.testing.assert_array_equal(got["ret"], ret.astype(np.float32))
        np.testing.assert_array_equal(got["length"], length)
        np.testing.assert_array_equal(got["next"][:-1], obs[1:].astype(np.float32))
    flags = np.concatenate([np.concatenate([r["terminated"], r["truncated"]], 1) for r in rollouts], 1)
    assert flags.any()
    assert np.concatenate([r["truncated"] for r in rollouts]).any()  # a time limit was hit


def test_async_vector_envs_step_as_sync_ones():
    _, sync = rollout_program("gymnasium", {"B": 2, "I": 2, "T": 20}, max_episode_steps=15)
    _, async_ = rollout_program("gymnasium", {"B": 2, "I": 2, "T": 20}, max_episode_steps=15, vector="async")
    for a, b in zip(sync, async_):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_tensor_cartpole_autoresets_with_gymnasium_dynamics():
    _, rollouts = rollout_program("tensor", {"B": 4, "I": 3, "T": 40}, max_episode_steps=25)
    got = {k: np.concatenate([r[k] for r in rollouts], axis=1) for k in rollouts[0]}
    done = got["terminated"] | got["truncated"]
    assert done.any() and got["truncated"].any()
    np.testing.assert_array_equal(got["next"][:, :-1], got["obs"][:, 1:])   # carried across rollout boundaries
    np.testing.assert_array_equal(got["next"][~done], got["final"][~done])
    assert np.all(np.abs(got["next"][done]) <= 0.05)                       # a fresh initial state after the end
    for b in range(4):
        length = 0
        for t in range(got["obs"].shape[1]):
            length += 1
            assert got["length"][b, t] == length
            assert got["truncated"][b, t] == (length >= 25)
            x, theta = got["final"][b, t][0], got["final"][b, t][2]
            assert got["terminated"][b, t] == (abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360)
            length = 0 if done[b, t] else length


def test_an_autoresetting_environment_needs_b_i_t():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        with pytest.raises(tpo.TempoError, match=r"dims \(b, i, t\)"):
            tempo.rl.make("CartPole-v1", dims=(b, t), autoreset=True)
        with pytest.raises(tpo.TempoError, match=r"dims \(b, i, t\)"):
            tempo.rl.make("CartPole-v1", dims=(b, t), impl="tensor", autoreset=True)
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        with pytest.raises(tpo.TempoError, match="rollout_every"):
            tempo.rl.make("CartPole-v1", dims=(b, i, t), autoreset=True, rollout_every=0)
        with pytest.raises(tpo.TempoError, match="vector"):
            tempo.rl.make("CartPole-v1", dims=(b, i, t), autoreset=True, vector="threads")
