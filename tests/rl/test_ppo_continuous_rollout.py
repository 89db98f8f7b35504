"""examples/ppo_continuous.py's environment side against the CleanRL-style baseline's, step by step.

Both pipelines step HalfCheetah-v5 (episodes cut at a short time limit, so
that truncations and resets happen inside and across rollouts) with the same
environment seeds and the same action sequence, drawn wide enough that the
Box bounds clip them. Tempo's side is the example's: the autoresetting vector
env, ``NormalizeObservation(autoreset=True)`` with ``final``,
``NormalizeReward`` and ``episode_statistics``, carried from one rollout to
the next at every ``K``-th point of ``i``. The baseline's is
``benchmarks/baselines/cleanrl_rollout_ppo.py``'s ``make_env`` wrappers in a
same-step autoreset ``SyncVectorEnv``, the way CleanRL's
``ppo_continuous_action.py`` builds them. The normalised observations (the
ones the policy sees and the final ones a truncation bootstraps from), the
normalised rewards, the episode ends and statistics, and the wrappers'
running statistics must agree at every step, to the rounding of two float32
casts: Tempo's environment hands rewards on as float32 (gymnasium's
``NormalizeReward`` reads the float64 one), and gymnasium's
``NormalizeObservation`` keeps its first variance as float32 (the dtype of
the observation space it makes) where Tempo keeps float64.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many

pytest.importorskip("mujoco")

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("cleanrl_rollout_ppo",
                                              ROOT / "benchmarks" / "baselines" / "cleanrl_rollout_ppo.py")
baseline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(baseline)

ENV_ID, LIMIT, GAMMA = "HalfCheetah-v5", 13, 0.99
NUM_ENVS, NUM_STEPS, ROLLOUTS, K = 2, 10, 3, 2  # K: points of i per rollout, as the example's updates


def actions(seed: int = 0) -> np.ndarray:
    """The action of every (env, rollout, step): Gaussian with std 1.5, so the bounds [-1, 1] clip many."""
    return np.random.default_rng(seed).normal(0.0, 1.5, size=(NUM_ENVS, ROLLOUTS, NUM_STEPS, 6)).astype(np.float32)


def tempo_side(acts: np.ndarray):
    """The example's environment side driven by ``acts``: per rollout, what the learner and the log read."""
    seen: dict[int, dict] = {}
    with tpo.Context(seed=3) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make(ENV_ID, dims=(b, i, t), autoreset=True, rollout_every=K, max_episode_steps=LIMIT)
        by_point = np.zeros((NUM_ENVS, ROLLOUTS * K, NUM_STEPS, 6), np.float32)
        by_point[:, ::K] = acts
        a = tpo.from_numpy(by_point, dims=(b, i, t))
        raw = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        raw[b, i, 0] = env.reset()
        norm = tempo.rl.NormalizeObservation(raw, rollout_every=K, autoreset=True)
        step = env.step(a)
        raw[b, i, t + 1] = step.obs
        final = norm.final(step.final_obs, step.done)
        reward = tempo.rl.NormalizeReward(step.reward, step.terminated, GAMMA, rollout_every=K)
        episode_return, episode_length = tempo.rl.episode_statistics(step.reward, step.done, every=K)
        parts = dict(obs=norm.normalized, final=final, reward=reward.normalized, terminated=step.terminated,
                     truncated=step.truncated, done=step.done, episode_return=episode_return,
                     episode_length=episode_length, reward_var=reward.var, obs_mean=norm.mean, obs_var=norm.var,
                     obs_count=norm.rms.count)
        at = (i % K) == 0
        sink_many({k: v[0:B, i, 0:T][at] for k, v in parts.items()},
                  lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: NUM_ENVS, I: ROLLOUTS * K, T: NUM_STEPS})
    got = {k: np.concatenate([seen[p][k] for p in sorted(seen)], axis=1) for k in seen[0]}
    return env, got


def wrapper(env: gymnasium.Env, kind: type) -> gymnasium.Env:
    while not isinstance(env, kind):
        env = env.env
    return env


def baseline_side(seeds: list[int], acts: np.ndarray) -> dict[str, np.ndarray]:
    """The baseline's wrappers in a same-step autoreset vector env, stepped with ``acts`` rollout after rollout."""
    make = baseline.make_env(ENV_ID, GAMMA)
    envs = gymnasium.vector.SyncVectorEnv([lambda: make_limited(make)] * NUM_ENVS,
                                          autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=seeds)
    rows = {k: [] for k in ("obs", "final", "reward", "terminated", "truncated", "episode_return",
                            "episode_length", "obs_mean", "obs_var", "obs_count", "reward_var")}
    for step in acts.transpose(1, 2, 0, 3).reshape(ROLLOUTS * NUM_STEPS, NUM_ENVS, 6):
        rows["obs"].append(obs)  # with the statistics that include it, as the policy sees it
        obs_rms = [wrapper(e, gymnasium.wrappers.NormalizeObservation).obs_rms for e in envs.envs]
        rows["obs_mean"].append([r.mean for r in obs_rms])
        rows["obs_var"].append([r.var for r in obs_rms])
        rows["obs_count"].append([r.count for r in obs_rms])
        obs, reward, terminated, truncated, info = envs.step(step)
        final = obs.copy()
        for k in np.flatnonzero(info.get("_final_obs", [])):
            final[k] = info["final_obs"][k]
        ended = info.get("final_info", {}).get("_episode", np.zeros(NUM_ENVS, bool))
        rows["final"].append(final)
        rows["reward"].append(reward)
        rows["terminated"].append(terminated)
        rows["truncated"].append(truncated)
        ep = info["final_info"]["episode"] if ended.any() else {"r": np.zeros(NUM_ENVS), "l": np.zeros(NUM_ENVS)}
        rows["episode_return"].append(np.where(ended, ep["r"], np.nan))
        rows["episode_length"].append(np.where(ended, ep["l"], -1))
        rows["reward_var"].append([wrapper(e, gymnasium.wrappers.NormalizeReward).return_rms.var.item()
                                   for e in envs.envs])
    envs.close()
    return {k: np.swapaxes(np.array(v), 0, 1) for k, v in rows.items()}  # (env, step, ...)


def make_limited(make) -> gymnasium.Env:
    """The baseline's environment with the short time limit: ``gymnasium.make`` sees ``max_episode_steps``."""
    real = gymnasium.make
    gymnasium.make = lambda env_id, **kwargs: real(env_id, max_episode_steps=LIMIT, **kwargs)
    try:
        return make()
    finally:
        gymnasium.make = real


def test_environment_side_matches_the_baseline_step_by_step():
    acts = actions()
    env, ours = tempo_side(acts)
    theirs = baseline_side([env.reset_seed(b) for b in range(NUM_ENVS)], acts)
    done = ours["done"]
    assert ours["truncated"].any() and not ours["terminated"].any()  # HalfCheetah only truncates
    assert done[:, NUM_STEPS:2 * NUM_STEPS].any() and done[:, 2 * NUM_STEPS:].any()  # ends in two rollouts
    np.testing.assert_array_equal(ours["terminated"], theirs["terminated"])
    np.testing.assert_array_equal(ours["truncated"], theirs["truncated"])
    np.testing.assert_allclose(ours["obs"], theirs["obs"], rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(ours["final"], theirs["final"])
    np.testing.assert_allclose(ours["reward"], theirs["reward"], rtol=1e-6)
    np.testing.assert_allclose(ours["episode_return"][done], theirs["episode_return"][done], rtol=1e-6)
    np.testing.assert_array_equal(ours["episode_length"][done], theirs["episode_length"][done])
    np.testing.assert_array_equal(ours["obs_mean"], theirs["obs_mean"])
    np.testing.assert_array_equal(ours["obs_count"], theirs["obs_count"])
    np.testing.assert_allclose(ours["obs_var"], theirs["obs_var"], rtol=1e-7)
    np.testing.assert_allclose(ours["reward_var"], theirs["reward_var"], rtol=1e-6)
    assert np.abs(acts).max() > 1.0  # some actions were clipped by both


def test_the_baseline_wraps_as_cleanrl_does():
    """CleanRL's ``make_env`` order, outermost last; the vector env autoresets on the same step."""
    env = baseline.make_env(ENV_ID, GAMMA)()
    chain = []
    while isinstance(env, gymnasium.Wrapper):
        chain.append(type(env).__name__)
        env = env.env
    assert chain[::-1][-7:] == ["FlattenObservation", "RecordEpisodeStatistics", "ClipAction",
                                "NormalizeObservation", "TransformObservation", "NormalizeReward",
                                "TransformReward"]
    assert all(name in ("TimeLimit", "OrderEnforcing", "PassiveEnvChecker") for name in chain[::-1][:-7])
