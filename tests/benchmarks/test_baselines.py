"""benchmarks/baselines: the torch and JAX baselines run tempo/Synthetic-v0's dynamics, the examples'
hyper-parameters, and train."""
from __future__ import annotations

import dataclasses
import importlib
import math
import runpy
import sys

import numpy as np
import pytest

import tempo as tpo
import tempo.rl

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "baselines"))
synthetic_env = importlib.import_module("synthetic_env")

OBS_SHAPE, NUM_ACTIONS, EPISODE_LENGTH, STEPS = (3, 2, 2), 5, 6, 9


def tempo_rollout(initial, actions):
    """Tempo's environment from the states ``initial`` (B,) under the actions (B, STEPS)."""
    with tpo.Context(seed=0) as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make("tempo/Synthetic-v0", dims=(b, t), obs_shape=OBS_SHAPE, num_actions=NUM_ACTIONS,
                            episode_length=EPISODE_LENGTH)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset(initial_state=initial)
        o[b, t + 1], r, d = env.step(tpo.from_numpy(actions, dims=(b, t)))
        obs, reward, done = ctx.run({B: len(initial), T: STEPS}, fetch=[o, r, d])
    return env, obs, reward, done


def framework_rollout(xp, asarray, initial, actions):
    """The baselines' environment (``xp``: torch or jax.numpy) from the same states under the same actions."""
    pattern = asarray(synthetic_env.pattern(OBS_SHAPE))
    state, ended = asarray(initial), asarray(np.zeros(len(initial), bool))
    obs, reward, done = [], [], []
    for t in range(STEPS):
        obs.append(np.asarray(synthetic_env.observe(pattern, state, NUM_ACTIONS)))
        state, r, ended = synthetic_env.step(xp, state, ended, asarray(actions[:, t]), t, NUM_ACTIONS, EPISODE_LENGTH)
        reward.append(np.asarray(r))
        done.append(np.asarray(ended))
    return np.stack(obs, 1), np.stack(reward, 1), np.stack(done, 1)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_baselines_environment_is_tempo_synthetic_v0(framework):
    rng = np.random.default_rng(0)
    initial = np.arange(NUM_ACTIONS, dtype=np.int64)                 # every hidden state once
    actions = rng.integers(0, NUM_ACTIONS, size=(NUM_ACTIONS, STEPS))
    actions[:, 0] = initial                                          # a rewarded first step
    env, obs, reward, done = tempo_rollout(initial, actions)
    if framework == "torch":
        import torch

        ours = framework_rollout(torch, torch.as_tensor, initial, actions)
    else:
        import jax.numpy as jnp

        ours = framework_rollout(jnp, jnp.asarray, initial, actions)
    np.testing.assert_array_equal(synthetic_env.pattern(OBS_SHAPE), env.pattern)
    np.testing.assert_allclose(ours[0], obs, rtol=1e-6)              # same observation for the same state
    np.testing.assert_array_equal(ours[1], reward)                   # same rewards, 0 after the end
    np.testing.assert_array_equal(ours[2], done)                     # truncation after EPISODE_LENGTH steps
    assert (reward[:, 0] == 1).all() and done[:, EPISODE_LENGTH - 1:].all() and not done[:, :EPISODE_LENGTH - 1].any()


SHARED = {"ppo": ("gamma", "lam", "clip", "lr", "value_coef", "entropy_coef", "seed"),
          "reinforce": ("gamma", "lr", "lr_decay", "seed")}


@pytest.mark.parametrize("style", ["cleanrl", "purejaxrl"])
@pytest.mark.parametrize("algo", ["ppo", "reinforce"])
def test_the_baselines_default_to_the_examples_hyper_parameters(style, algo):
    script = {"ppo": "ppo_fixed_horizon", "reinforce": "reinforce"}[algo]  # the algorithms rl_train.py measures
    example = runpy.run_path(str(ROOT / "examples" / f"{script}.py"), run_name=algo)["Args"]()
    baseline = importlib.import_module(f"{style}_{algo}").Args()
    for name in SHARED[algo]:
        assert getattr(baseline, name) == getattr(example, name), name
    if algo == "ppo":
        assert baseline.max_grad_norm == 0.5                         # examples/ppo_fixed_horizon.py's Adam(max_grad_norm=0.5)


def run_baseline(style, algo, iterations, **sizes):
    module = importlib.import_module(f"{style}_{algo}")
    return module.main(module.Args(iterations=iterations, **sizes))


@pytest.mark.slow  # tests/benchmarks/test_rl_train.py runs the REINFORCE baselines in the fast suite
@pytest.mark.parametrize("style", ["cleanrl", "purejaxrl"])
@pytest.mark.parametrize("algo", ["ppo", "reinforce"])
def test_each_baseline_runs_with_finite_losses(style, algo):
    out = run_baseline(style, algo, 2, envs=3, steps=5, hidden=4, layers=1)
    assert len(out["returns"]) == len(out["losses"]) == len(out["ends"]) == 2
    assert all(math.isfinite(x) for x in out["losses"])
    assert all(0 <= x <= 5 for x in out["returns"])
    assert out["start"] < out["ends"][0] < out["ends"][1] and out["compile_s"] >= 0


@pytest.mark.slow
@pytest.mark.parametrize("style", ["cleanrl", "purejaxrl"])
@pytest.mark.parametrize("algo", ["ppo", "reinforce"])
def test_each_baseline_learns_to_read_the_state(style, algo):
    """A policy that reads the state off the observation earns 1 per step (16 here); a random one 8."""
    returns = run_baseline(style, algo, 50, envs=32, steps=16, hidden=32, num_actions=2, seed=1)["returns"]
    assert np.mean(returns[:5]) < 10 and np.mean(returns[-5:]) > np.mean(returns[:5]) + 2, returns


@pytest.mark.parametrize("algo", ["ppo", "reinforce"])
def test_the_whole_run_baseline_trains_as_the_per_iteration_one(algo):
    """One program for the whole run (a lax.scan over the iterations) computes what one launch per iteration does."""
    sizes = dict(envs=3, steps=5, hidden=4, layers=1)
    whole = run_baseline("purejaxrl_whole", algo, 3, **sizes)
    per_iteration = run_baseline("purejaxrl", algo, 3, **sizes)
    np.testing.assert_allclose(whole["returns"], per_iteration["returns"], rtol=1e-5)
    np.testing.assert_allclose(whole["losses"], per_iteration["losses"], rtol=1e-4, atol=1e-6)
    assert whole["start"] < whole["ends"][0] < whole["ends"][-1] and len(whole["ends_cpu"]) == 3
    assert whole["start_sys"] <= whole["ends_sys"][0] <= whole["ends_sys"][-1] and len(whole["ends_sys"]) == 3
