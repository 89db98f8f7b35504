"""The example's normalisers against the CleanRL-style baseline's gymnasium wrappers over a long stream.

One HalfCheetah-v5 environment steps ``--rollouts`` rollouts of 2048 steps
(``ppo_continuous_action.py``'s rollout, 146 rollouts: the 300k-step runs of
``benchmarks/rl_learning.py``) with the same reset seed and the same actions
(Gaussian with std 1.5, so that the bounds clip many) on both sides:

- Tempo's side is ``examples/ppo_continuous.py``'s: the autoresetting
  gymnasium vector env of ``tpo.rl.make``, ``NormalizeObservation(autoreset=True)``
  with ``final``, and ``NormalizeReward`` over ``(b, i, t)``;
- the baseline's is ``benchmarks/baselines/cleanrl_rollout_ppo.py``'s
  ``make_env`` (CleanRL's wrappers: gymnasium's ``NormalizeObservation`` and
  ``NormalizeReward``, float64 ``RunningMeanStd``, each clipped to
  ``[-10, 10]``) in a same-step autoreset ``SyncVectorEnv``.

It reports the largest difference at any step between what the learner reads
(the normalised observation, the normalised final observation a truncation
bootstraps from, the normalised reward) and the running statistics after the
last step, each relative to the baseline's largest magnitude. For scale, the
same statistics kept by a float32 recurrence (gymnasium's update, every array
cast to float32 after each step) are set against the baseline's float64 ones:
the drift a float32 normaliser would show over the stream.

    .venv/bin/python benchmarks/rl_normalizers.py --out docs/results/rl_normalizers_halfcheetah_300k
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import gymnasium
import numpy as np

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many
from tempo.files import write_json_atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = importlib.util.spec_from_file_location("cleanrl_rollout_ppo",
                                              os.path.join(ROOT, "benchmarks", "baselines", "cleanrl_rollout_ppo.py"))
baseline = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(baseline)

ENV_ID, GAMMA, STEPS, SEED = "HalfCheetah-v5", 0.99, 2048, 1


def actions(rollouts: int, seed: int = 0) -> np.ndarray:
    """Every step's action ``(rollouts, steps, 6)``: Gaussian with std 1.5, about half outside the bounds."""
    return np.random.default_rng(seed).normal(0.0, 1.5, size=(rollouts, STEPS, 6)).astype(np.float32)


def tempo_side(acts: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
    """The example's environment side driven by ``acts``: what the learner reads at every step, the statistics
    after the last one, and the environment's reset seed."""
    rollouts = acts.shape[0]
    with tpo.Context(seed=SEED) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make(ENV_ID, dims=(b, i, t), autoreset=True)
        raw = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        raw[b, i, 0] = env.reset()
        norm = tempo.rl.NormalizeObservation(raw, autoreset=True)
        step = env.step(tpo.from_numpy(acts[None], dims=(b, i, t)))
        raw[b, i, t + 1] = step.obs
        final = norm.final(step.final_obs, step.done)
        reward = tempo.rl.NormalizeReward(step.reward, step.terminated, GAMMA)
        parts = {"obs": norm.normalized, "final": final, "reward": reward.normalized, "done": step.done,
                 "obs_mean": norm.mean, "obs_var": norm.var, "obs_count": norm.rms.count, "reward_var": reward.var}
        seen: dict[int, dict] = {}
        sink_many({k: v[0:B, i, 0:T] for k, v in parts.items()},
                  lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: 1, I: rollouts, T: STEPS})
        seed = env.reset_seed(0)
    out = {k: np.concatenate([seen[r][k][0] for r in range(rollouts)]) for k in ("obs", "final", "reward", "done")}
    out.update({k: seen[rollouts - 1][k][0, -1] for k in ("obs_mean", "obs_var", "obs_count", "reward_var")})
    return out, seed


def wrapper(env: gymnasium.Env, kind: type) -> gymnasium.Env:
    while not isinstance(env, kind):
        env = env.env
    return env


class Float32Stats:
    """gymnasium's ``RunningMeanStd`` update on one sample, every array kept as float32."""

    def __init__(self, shape):
        self.mean, self.var, self.count = np.zeros(shape, np.float32), np.ones(shape, np.float32), np.float32(1e-4)

    def update(self, x) -> None:
        x = np.float32(x)
        delta = x - self.mean
        total = self.count + np.float32(1.0)
        self.mean = (self.mean + delta / total).astype(np.float32)
        self.var = ((self.var * self.count + delta * delta * self.count / total) / total).astype(np.float32)
        self.count = np.float32(total)


def baseline_side(seed: int, acts: np.ndarray) -> dict[str, np.ndarray]:
    """The baseline's wrappers in a same-step autoreset vector env stepped with ``acts``; beside them, the
    statistics a float32 recurrence keeps over the observations and discounted returns the wrappers merge."""
    envs = gymnasium.vector.SyncVectorEnv([baseline.make_env(ENV_ID, GAMMA)],
                                          autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    inner = envs.envs[0]
    obs_wrapper = wrapper(inner, gymnasium.wrappers.NormalizeObservation)
    reward_wrapper = wrapper(inner, gymnasium.wrappers.NormalizeReward)
    f32_obs, f32_return = Float32Stats(envs.single_observation_space.shape), Float32Stats(())
    merge_obs = obs_wrapper.observation

    def observation(o):  # the float32 recurrence merges what the wrapper merges, in its order
        f32_obs.update(o)
        return merge_obs(o)

    obs_wrapper.observation = observation
    obs, _ = envs.reset(seed=[seed])
    rows = {k: [] for k in ("obs", "final", "reward")}
    flat = acts.reshape(-1, acts.shape[-1])
    stats_before_last = {}
    for k, action in enumerate(flat):
        rows["obs"].append(obs[0])
        if k == len(flat) - 1:  # the statistics Tempo's normalised observation at the last step is made with
            rms = obs_wrapper.obs_rms
            stats_before_last = {"obs_mean": rms.mean.copy(), "obs_var": rms.var.copy(), "obs_count": float(rms.count),
                                 "f32_obs_mean": f32_obs.mean.copy(), "f32_obs_var": f32_obs.var.copy()}
        obs, reward, terminated, truncated, info = envs.step(action[None])
        f32_return.update(reward_wrapper.discounted_reward[0])
        rows["final"].append(info["final_obs"][0] if info.get("_final_obs", [False])[0] else obs[0])
        rows["reward"].append(reward[0])
    out = {k: np.array(v) for k, v in rows.items()}
    out.update(stats_before_last, reward_var=float(reward_wrapper.return_rms.var.item()),
               f32_reward_var=float(f32_return.var))
    envs.close()
    return out


def relative(ours, theirs) -> float:
    """The largest difference, relative to the largest magnitude of ``theirs``."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rollouts", type=int, default=146, help="rollouts of 2048 steps (146: a 300k-step run)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "rl_normalizers_halfcheetah_300k"),
                   help="output path without extension (.json is written)")
    args = p.parse_args(argv)
    acts = actions(args.rollouts)
    cpu = time.process_time()
    ours, seed = tempo_side(acts)
    tempo_cpu, cpu = time.process_time() - cpu, time.process_time()
    theirs = baseline_side(seed, acts)
    baseline_cpu = time.process_time() - cpu
    done = ours["done"].reshape(-1)
    assert not done[-2:].any(), "the last two steps end no episode: the statistics line up as compared"
    rows = {
        "normalised observation, every step": relative(ours["obs"], theirs["obs"]),
        "normalised final observation, every step": relative(ours["final"], theirs["final"]),
        "normalised reward, every step": relative(ours["reward"], theirs["reward"]),
        "observation mean, last step": relative(ours["obs_mean"], theirs["obs_mean"]),
        "observation variance, last step": relative(ours["obs_var"], theirs["obs_var"]),
        "observation count, last step": relative(ours["obs_count"], theirs["obs_count"]),
        "discounted return variance, last step": relative(ours["reward_var"], theirs["reward_var"]),
    }
    float32 = {
        "observation mean, last step": relative(theirs["f32_obs_mean"], theirs["obs_mean"]),
        "observation variance, last step": relative(theirs["f32_obs_var"], theirs["obs_var"]),
        "discounted return variance, last step": relative(theirs["f32_reward_var"], theirs["reward_var"]),
    }
    print(f"{ENV_ID}, {len(done)} steps, {int(done.sum())} episode ends; relative to the baseline's largest value")
    print("| quantity | Tempo against the baseline | a float32 recurrence against the baseline |")
    print("| --- | --- | --- |")
    for name, value in rows.items():
        print(f"| {name} | {value:.1e} | {f'{float32[name]:.1e}' if name in float32 else '-'} |")
    report = {"argv": sys.argv[1:] if argv is None else list(argv), "env": ENV_ID, "steps": int(len(done)),
              "episode_ends": int(done.sum()), "tempo_vs_baseline": rows, "float32_vs_baseline": float32,
              "tempo_cpu_s": tempo_cpu, "baseline_cpu_s": baseline_cpu, "load_avg": os.getloadavg()[0]}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    write_json_atomic(args.out + ".json", report)
    return report


if __name__ == "__main__":
    main()
