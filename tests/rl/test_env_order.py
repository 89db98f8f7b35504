"""An environment's host calls run in the order of its state, whatever the action reads.

Each program steps with a constant action that reads no observation, and
fetches only what the step returns: nothing but the environment itself
orders the reset before the first step, one step before the next, and one
rollout's last step before the next rollout's first. Each runs against the
same program whose action reads the observation (data dependence orders
it), and the gymnasium ones against gymnasium run by hand.
"""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many

ACTION = 1  # CartPole's push to the right: the pole falls within a few dozen steps


def constant_action(o, reads_obs: bool, sizes: tuple[int, ...]):
    """``ACTION`` at every point of ``o``'s dims (of ``sizes``); made to read ``o`` when ``reads_obs``."""
    a = tpo.from_numpy(np.full(sizes, ACTION, np.int64), dims=o.domain)
    return a + (o.spatial[2] * 0).cast("int64") if reads_obs else a


def autoreset_program(impl: str, reads_obs: bool, every: int, bounds: dict):
    """Each rollout's ``(reward, terminated, truncated, final_obs)``, by rollout."""
    seen: dict[int, dict] = {}
    with tpo.Context(seed=4) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl=impl, autoreset=True, rollout_every=every,
                            max_episode_steps=12)
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset()
        step = env.step(constant_action(o, reads_obs, (bounds["B"], bounds["I"], bounds["T"])))
        o[b, i, t + 1] = step.obs
        parts = dict(reward=step.reward, terminated=step.terminated, truncated=step.truncated, final=step.final_obs)
        sink_many({k: v[0:B, i, 0:T][(i % every) == 0] for k, v in parts.items()},
                  lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: bounds["B"], I: bounds["I"], T: bounds["T"]})
    return env, [seen[k] for k in sorted(seen)]


def vector_by_hand(seeds: list[int], steps: int) -> list[list[tuple]]:
    """Gymnasium's CartPole under the constant action, env by env, resetting (unseeded) after an episode ends."""
    rows = []
    for seed in seeds:
        env = gymnasium.make("CartPole-v1", max_episode_steps=12)
        env.reset(seed=seed)
        out = []
        for _ in range(steps):
            final, reward, terminated, truncated, _ = env.step(ACTION)
            out.append((reward, terminated, truncated, final))
            if terminated or truncated:
                env.reset()
        rows.append(out)
    return rows


@pytest.mark.parametrize("every", [1, 2])
def test_a_vector_env_steps_after_its_reset_when_the_action_reads_no_observation(every):
    env, rollouts = autoreset_program("gymnasium", False, every, {"B": 2, "I": 3 * every, "T": 7})
    assert len(rollouts) == 3
    reference = vector_by_hand([env.reset_seed(b) for b in range(2)], 21)
    for b in range(2):
        reward, terminated, truncated, final = map(np.array, zip(*reference[b]))
        got = {k: np.concatenate([r[k][b] for r in rollouts]) for k in rollouts[0]}
        np.testing.assert_array_equal(got["reward"], reward.astype(np.float32))
        np.testing.assert_array_equal(got["terminated"], terminated)
        np.testing.assert_array_equal(got["truncated"], truncated)
        np.testing.assert_array_equal(got["final"], final.astype(np.float32))
        assert (terminated | truncated).any()  # episodes ended within the rollouts: the autoreset ran


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_autoreset_rollouts_do_not_depend_on_whether_the_action_reads_the_observation(impl):
    bounds = {"B": 2, "I": 3, "T": 7}
    _, constant = autoreset_program(impl, False, 1, bounds)
    _, reading = autoreset_program(impl, True, 1, bounds)
    for got, want in zip(constant, reading, strict=True):
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


def episodic_program(impl: str, reads_obs: bool, bounds: dict):
    """``(reward, done)`` of episodes over ``(b, i, t)`` of ``tpo.rl.make`` without autoreset."""
    with tpo.Context(seed=4) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl=impl)
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset()
        next_obs, reward, done = env.step(constant_action(o, reads_obs, (bounds["B"], bounds["I"], bounds["T"])))
        o[b, i, t + 1] = next_obs
        sizes = {B: bounds["B"], I: bounds["I"], T: bounds["T"]}
        return env, ctx.run(sizes, fetch=[reward, done])


def episode_by_hand(seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """One gymnasium episode under the constant action, under mask semantics."""
    env = gymnasium.make("CartPole-v1")
    env.reset(seed=seed)
    out, done = [], False
    for _ in range(steps):
        reward = 0.0
        if not done:
            _, reward, terminated, truncated, _ = env.step(ACTION)
            done = terminated or truncated
        out.append((reward, done))
    reward, done = zip(*out)
    return np.array(reward, np.float32), np.array(done)


def test_episodes_step_after_their_reset_when_the_action_reads_no_observation():
    env, (reward, done) = episodic_program("gymnasium", False, {"B": 2, "I": 2, "T": 40})
    for key in np.ndindex(2, 2):
        want_reward, want_done = episode_by_hand(env.reset_seed(key), 40)
        np.testing.assert_array_equal(reward[key], want_reward)
        np.testing.assert_array_equal(done[key], want_done)
        assert want_done[-1]


@pytest.mark.parametrize("impl", ["gymnasium", "tensor"])
def test_episodes_do_not_depend_on_whether_the_action_reads_the_observation(impl):
    bounds = {"B": 2, "I": 2, "T": 40}
    _, constant = episodic_program(impl, False, bounds)
    _, reading = episodic_program(impl, True, bounds)
    for got, want in zip(constant, reading, strict=True):
        np.testing.assert_array_equal(got, want)
