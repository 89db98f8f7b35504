"""Observation and reward normalisation as recurrences, against gymnasium's wrappers on the same data."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeObservation, NormalizeReward

import tempo as tpo
import tempo.rl

B, I, T = 2, 3, 6


class Replay(gymnasium.Env):
    """An environment that replays given observations, rewards and terminations."""

    def __init__(self, obs, rewards=None, terminated=None):
        self.obs, self.rewards, self.terminated, self.k = obs, rewards, terminated, 0
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, obs.shape[1:], np.float32)
        self.action_space = gymnasium.spaces.Discrete(1)

    def reset(self, seed=None, options=None):
        return self.obs[0], {}

    def step(self, action):
        self.k += 1
        reward = 0.0 if self.rewards is None else float(self.rewards[self.k - 1])
        terminated = False if self.terminated is None else bool(self.terminated[self.k - 1])
        return self.obs[self.k], reward, terminated, False, {}


def observations(seed=0, shape=(B, I, T, 3)):
    rng = np.random.default_rng(seed)
    data = (rng.normal(size=shape) * [1.0, 5.0, 0.1] + [2.0, -1.0, 0.0]).astype(np.float32)
    data.reshape(-1)[9] = 400.0  # an outlier
    return data


def gym_observations(stream: np.ndarray, clip=10.0) -> np.ndarray:
    env = NormalizeObservation(Replay(stream))
    out = [env.reset()[0]] + [env.step(0)[0] for _ in range(len(stream) - 1)]
    return np.clip(np.array(out), -clip, clip)


def gym_rewards(rewards: np.ndarray, terminated: np.ndarray, gamma: float, clip: float) -> np.ndarray:
    env = NormalizeReward(Replay(np.zeros((len(rewards) + 1, 1), np.float32), rewards, terminated), gamma=gamma)
    env.reset()
    return np.clip(np.array([env.step(0)[1] for _ in rewards]), -clip, clip)


def normalize_obs(data, valid=None, **kwargs):
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        o = tpo.from_numpy(data, dims=(b, i, t))
        ok = None if valid is None else tpo.from_numpy(valid, dims=(b, i, t))
        norm = tempo.rl.NormalizeObservation(o, valid=ok, **kwargs)
        return ctx.run({Bs: data.shape[0], Is: data.shape[1], Ts: data.shape[2]}, fetch=[norm.normalized])[0]


def test_observations_match_gymnasium_per_environment_across_iterations():
    data = observations()
    ours = normalize_obs(data)
    assert ours.dtype == np.float32
    for k in range(B):
        np.testing.assert_allclose(ours[k].reshape(I * T, 3), gym_observations(data[k].reshape(I * T, 3)),
                                   rtol=1e-4, atol=2e-5)


def test_observations_over_one_time_dim_and_another_clip():
    data = observations(seed=1, shape=(3, 10, 3))
    with tpo.Context() as ctx:
        (b, Bs), (t, Ts) = ctx.dims("b", "t")
        norm = tempo.rl.NormalizeObservation(tpo.from_numpy(data, dims=(b, t)), clip=1.5)
        ours, = ctx.run({Bs: 3, Ts: 10}, fetch=[norm.normalized])
    for k in range(3):
        np.testing.assert_allclose(ours[k], gym_observations(data[k], clip=1.5), rtol=1e-4, atol=2e-5)
    assert np.abs(ours).max() == np.float32(1.5)


def test_invalid_steps_leave_the_statistics_alone():
    data = observations(seed=2)
    valid = np.ones((B, I, T), bool)
    valid[:, :, 4:] = False  # the padding after each episode's end
    ours = normalize_obs(data, valid=valid)
    for k in range(B):
        kept = data[k][valid[k]]
        np.testing.assert_allclose(ours[k][valid[k]], gym_observations(kept), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("gamma, clip", [(0.99, 10.0), (0.9, 0.5)])
def test_rewards_match_gymnasium_with_terminations(gamma, clip):
    rng = np.random.default_rng(3)
    rewards = rng.normal(1.0, 3.0, size=(B, I, T)).astype(np.float32)
    terminated = rng.random((B, I, T)) < 0.2
    rewards[1, 2, 5] = 1e4  # an outlier
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        norm = tempo.rl.NormalizeReward(tpo.from_numpy(rewards, dims=(b, i, t)),
                                        tpo.from_numpy(terminated, dims=(b, i, t)), gamma=gamma, clip=clip)
        ours, = ctx.run({Bs: B, Is: I, Ts: T}, fetch=[norm.normalized])
    assert np.abs(ours).max() == np.float32(clip)  # the clip is reached (the first step divides by ~0)
    for k in range(B):
        ref = gym_rewards(rewards[k].reshape(-1), terminated[k].reshape(-1), gamma, clip)
        np.testing.assert_allclose(ours[k].reshape(-1), ref, rtol=1e-5, atol=1e-6)


def run_normalized(data, rewards, terminated, iterations, path=None, resume_from=None, start=0):
    """Both wrappers over (b, i, t), checkpointed at every i; resumed from ``resume_from`` at ``start``."""
    with tpo.Context(start={"i": start}) as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        obs = tempo.rl.NormalizeObservation(tpo.from_numpy(data[:, start:start + iterations], dims=(b, i, t)))
        rew = tempo.rl.NormalizeReward(tpo.from_numpy(rewards[:, start:start + iterations], dims=(b, i, t)),
                                       tpo.from_numpy(terminated[:, start:start + iterations], dims=(b, i, t)))
        if path is not None:
            tpo.checkpoint({**obs.state_dict(), **rew.state_dict()}, path)
        if resume_from is not None:
            ckpt = tpo.load_checkpoint(resume_from)
            obs.resume(ckpt)
            rew.resume(ckpt)
        return ctx.run({Bs: B, Is: iterations, Ts: T}, fetch=[obs.normalized, rew.normalized])


def test_statistics_checkpoint_and_resume_bit_identically(tmp_path):
    rng = np.random.default_rng(4)
    data = observations(seed=4, shape=(B, 4, T, 3))
    rewards = rng.normal(size=(B, 4, T)).astype(np.float32)
    terminated = rng.random((B, 4, T)) < 0.1
    full = run_normalized(data, rewards, terminated, 4, path=str(tmp_path / "norm-{i}.safetensors"))
    saved = tpo.load_checkpoint(str(tmp_path / "norm-1.safetensors"))
    assert saved.point == {"i": 1} and saved.tensors["obs_rms/mean"].shape == (B, 3)
    assert sorted(saved.tensors) == ["obs_rms/count", "obs_rms/mean", "obs_rms/var", "return_rms/count",
                                     "return_rms/mean", "return_rms/return", "return_rms/var"]
    np.testing.assert_allclose(saved.tensors["obs_rms/count"], [2 * T + 1e-4] * B)
    resumed = run_normalized(data, rewards, terminated, 2, resume_from=str(tmp_path / "norm-1.safetensors"),
                             start=2)
    for ours, theirs in zip(resumed, full):
        np.testing.assert_array_equal(ours, theirs[:, 2:])


def test_bad_time_dims_and_gamma_are_errors():
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        o = tpo.from_numpy(np.zeros((2, 3, 4, 1), np.float32), dims=(b, i, t))
        with pytest.raises(tpo.TempoError, match="time dims must be the tensor's last dims"):
            tempo.rl.NormalizeObservation(o, time=(b, i))
        with pytest.raises(tpo.TempoError, match="time must be one or two of the tensor's dims"):
            tempo.rl.NormalizeObservation(o, time=(b, i, t))
        with pytest.raises(tpo.TempoError, match="gamma must be in \\[0, 1\\], got 1.5"):
            tempo.rl.NormalizeReward(o.squeeze(0), o.squeeze(0) > 0, gamma=1.5)


def test_statistics_carry_from_rollout_to_rollout_every_k_updates():
    """With rollouts at every k-th i (tempo.rl.rollout), the statistics run through i = 0, k, 2k, ... only."""
    from tempo.api.sinks import sink_many

    every, data = 2, observations(seed=3, shape=(B, 3 * 2, T, 3))
    seen = {}
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        norm = tempo.rl.NormalizeObservation(tpo.from_numpy(data, dims=(b, i, t)), rollout_every=every)
        at = (i % every) == 0
        sink_many({"x": norm.normalized[0:Bs, i, 0:Ts][at]}, lambda x, point: seen.__setitem__(point["i"], x["x"]))
        ctx.run({Bs: B, Is: 3 * every, Ts: T})
    assert sorted(seen) == [0, 2, 4]
    for k in range(B):
        stream = data[k, ::every].reshape(-1, 3)
        ours = np.concatenate([seen[i][k] for i in sorted(seen)])
        np.testing.assert_allclose(ours, gym_observations(stream), rtol=1e-4, atol=2e-5)


class Episodes(gymnasium.Env):
    """Replays ``firsts`` (each episode's first observation) and ``reached`` (the observation each step
    reaches), ending an episode where ``ends`` holds (as a truncation: no termination)."""

    def __init__(self, firsts, reached, ends):
        self.firsts, self.reached, self.ends, self.episode, self.k = iter(firsts), reached, ends, 0, 0
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, reached.shape[1:], np.float32)
        self.action_space = gymnasium.spaces.Discrete(1)

    def reset(self, seed=None, options=None):
        return next(self.firsts), {}

    def step(self, action):
        self.k += 1
        return self.reached[self.k - 1], 0.0, False, bool(self.ends[self.k - 1]), {}


def autoreset_stream(seed: int, steps: int, size: int = 3):
    """One environment's observations as a same-step autoreset rollout sees them: the observation at
    each step, the one each step reaches, and where episodes end."""
    rng = np.random.default_rng(seed)
    ends = rng.random(steps) < 0.25
    reached = (rng.normal(size=(steps, size)) * [1.0, 5.0, 0.1] + [2.0, -1.0, 0.0]).astype(np.float32)
    firsts = (rng.normal(size=(int(ends.sum()) + 1, size)) * 3.0 + 10.0).astype(np.float32)  # unlike the rest
    obs = np.empty_like(reached)
    obs[0], starts = firsts[0], iter(firsts[1:])
    for k in range(1, steps):
        obs[k] = next(starts) if ends[k - 1] else reached[k - 1]
    return obs, reached, ends, firsts


def gym_autoreset(firsts, reached, ends):
    """gymnasium's NormalizeObservation inside a same-step autoresetting vector env: the normalised
    observation at each step and the normalised observation each step reaches (``final_obs``)."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    envs = SyncVectorEnv([lambda: NormalizeObservation(Episodes(firsts, reached, ends))],
                         autoreset_mode=AutoresetMode.SAME_STEP)
    seen, final = [envs.reset()[0][0]], []
    for k in range(len(reached)):
        obs, _, _, _, info = envs.step(np.zeros(1, np.int64))
        final.append(info["final_obs"][0] if ends[k] else obs[0])
        seen.append(obs[0])
    return np.clip(np.array(seen[:-1]), -10, 10), np.clip(np.array(final), -10, 10)


def test_autoreset_merges_each_final_observation_as_gymnasium_inside_a_vector_env():
    streams = [autoreset_stream(seed, I * T) for seed in (5, 6)]
    obs, reached = (np.stack([s[k] for s in streams]).reshape(B, I, T, 3) for k in range(2))
    ends = np.stack([s[2] for s in streams]).reshape(B, I, T)
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        norm = tempo.rl.NormalizeObservation(tpo.from_numpy(obs, dims=(b, i, t)), autoreset=True)
        final = norm.final(tpo.from_numpy(reached, dims=(b, i, t)), tpo.from_numpy(ends, dims=(b, i, t)))
        ours, ours_final = ctx.run({Bs: B, Is: I, Ts: T}, fetch=[norm.normalized, final])
    for k, (_, got, done, firsts) in enumerate(streams):
        seen, theirs_final = gym_autoreset(firsts, got, done)
        np.testing.assert_allclose(ours[k].reshape(I * T, 3), seen, rtol=1e-4, atol=2e-5)
        np.testing.assert_allclose(ours_final[k].reshape(I * T, 3), theirs_final, rtol=1e-4, atol=2e-5)
    within = ~ends.reshape(B, -1)[:, :-1]  # where an episode goes on, the reached observation is the next one
    np.testing.assert_array_equal(ours_final.reshape(B, -1, 3)[:, :-1][within], ours.reshape(B, -1, 3)[:, 1:][within])


def test_final_needs_an_autoreset_normaliser_and_is_called_once():
    with tpo.Context() as ctx:
        (b, Bs), (i, Is), (t, Ts) = ctx.dims("b", "i", "t")
        o = tpo.from_numpy(np.zeros((2, 3, 4, 1), np.float32), dims=(b, i, t))
        done = tpo.from_numpy(np.zeros((2, 3, 4), bool), dims=(b, i, t))
        with pytest.raises(tpo.TempoError, match="needs a normaliser made with autoreset=True"):
            tempo.rl.NormalizeObservation(o).final(o, done)
        norm = tempo.rl.NormalizeObservation(o, autoreset=True)
        norm.final(o, done)
        with pytest.raises(tpo.TempoError, match="called once"):
            norm.final(o, done)
        with pytest.raises(tpo.TempoError, match="give autoreset or valid, not both"):
            tempo.rl.NormalizeObservation(o, autoreset=True, valid=done)
