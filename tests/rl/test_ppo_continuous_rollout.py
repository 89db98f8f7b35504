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
import runpy
from pathlib import Path
from types import SimpleNamespace

import gymnasium
import numpy as np
import pytest
import torch

import tempo as tpo
import tempo.rl
from tempo.api.sinks import sink_many

pytest.importorskip("mujoco")

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("cleanrl_rollout_ppo",
                                              ROOT / "benchmarks" / "baselines" / "cleanrl_rollout_ppo.py")
baseline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(baseline)
example = SimpleNamespace(**runpy.run_path(str(ROOT / "examples" / "ppo_continuous.py"), run_name="example"))

ENV_ID, LIMIT, GAMMA = "HalfCheetah-v5", 13, 0.99
NUM_ENVS, NUM_STEPS, ROLLOUTS, K = 2, 10, 3, 2  # K: points of i per rollout, as the example's updates


def actions(rollouts: int = ROLLOUTS, steps: int = NUM_STEPS, size: int = 6, seed: int = 0) -> np.ndarray:
    """The action of every (env, rollout, step): Gaussian with std 1.5, so the bounds [-1, 1] clip many."""
    return np.random.default_rng(seed).normal(0.0, 1.5, size=(NUM_ENVS, rollouts, steps, size)).astype(np.float32)


def tempo_side(acts: np.ndarray, env_id: str = ENV_ID, limit: int = LIMIT):
    """The example's environment side on ``env_id`` (episodes cut at ``limit`` steps) driven by ``acts`` (env,
    rollout, step, action): per rollout, what the learner and the log read."""
    _, rollouts, steps, size = acts.shape
    seen: dict[int, dict] = {}
    with tpo.Context(seed=3) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make(env_id, dims=(b, i, t), autoreset=True, rollout_every=K, max_episode_steps=limit)
        by_point = np.zeros((NUM_ENVS, rollouts * K, steps, size), np.float32)
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
        ctx.run({B: NUM_ENVS, I: rollouts * K, T: steps})
    got = {k: np.concatenate([seen[p][k] for p in sorted(seen)], axis=1) for k in seen[0]}
    return env, got


def wrapper(env: gymnasium.Env, kind: type) -> gymnasium.Env:
    while not isinstance(env, kind):
        env = env.env
    return env


def baseline_side(seeds: list[int], acts: np.ndarray, env_id: str = ENV_ID,
                  limit: int = LIMIT) -> dict[str, np.ndarray]:
    """The baseline's wrappers in a same-step autoreset vector env, stepped with ``acts`` rollout after rollout."""
    make = baseline.make_env(env_id, GAMMA)
    envs = gymnasium.vector.SyncVectorEnv([lambda: make_limited(make, limit)] * NUM_ENVS,
                                          autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=seeds)
    rows = {k: [] for k in ("obs", "final", "reward", "terminated", "truncated", "episode_return",
                            "episode_length", "obs_mean", "obs_var", "obs_count", "reward_var")}
    for step in acts.transpose(1, 2, 0, 3).reshape(-1, NUM_ENVS, acts.shape[-1]):
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


def make_limited(make, limit: int = LIMIT) -> gymnasium.Env:
    """The baseline's environment with a short time limit: ``gymnasium.make`` sees ``max_episode_steps``."""
    real = gymnasium.make
    gymnasium.make = lambda env_id, **kwargs: real(env_id, max_episode_steps=limit, **kwargs)
    try:
        return make()
    finally:
        gymnasium.make = real


@pytest.mark.parametrize("env_id, limit, rollouts, steps, size", [
    (ENV_ID, LIMIT, ROLLOUTS, NUM_STEPS, 6),
    (ENV_ID, LIMIT, 40, 64, 6),
    ("Hopper-v5", 1000, 20, 64, 3),
])
def test_environment_side_matches_the_baseline_step_by_step(env_id, limit, rollouts, steps, size):
    """HalfCheetah (it only truncates) over 3 short rollouts, and over 40 rollouts of 64 steps (about 200
    episodes per environment), where the running statistics would drift apart if either side kept them in
    float32 (about 1e-6 relative); Hopper, whose episodes end by termination (the hopper falls), where
    no value is bootstrapped and the discounted return restarts."""
    acts = actions(rollouts, steps, size)
    env, ours = tempo_side(acts, env_id, limit)
    theirs = baseline_side([env.reset_seed(b) for b in range(NUM_ENVS)], acts, env_id, limit)
    done = ours["done"]
    if env_id == "Hopper-v5":
        assert ours["terminated"].sum() > 100 and not ours["truncated"].any()
    else:
        assert ours["truncated"].any() and not ours["terminated"].any()
    assert done[:, steps:2 * steps].any() and done[:, 2 * steps:].any()  # ends in two rollouts
    np.testing.assert_array_equal(ours["terminated"], theirs["terminated"])
    np.testing.assert_array_equal(ours["truncated"], theirs["truncated"])
    np.testing.assert_allclose(ours["obs"], theirs["obs"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ours["final"], theirs["final"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ours["reward"], theirs["reward"], rtol=1e-6)
    returns = theirs["episode_return"][done]  # summed in float32 by Tempo: to its rounding at the returns' scale
    np.testing.assert_allclose(ours["episode_return"][done], returns, rtol=1e-6, atol=1e-6 * np.abs(returns).max())
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


def mlp(weights: dict[str, np.ndarray], part: str, x: np.ndarray) -> np.ndarray:
    """The example's ``tpo.nn.MLP`` (tanh between layers) in NumPy, float64."""
    layers = sorted({name.split(".")[2] for name in weights if name.startswith(part + ".")})
    for k in range(len(layers)):
        x = x @ weights[f"{part}.layers.{k}.weight"] + weights[f"{part}.layers.{k}.bias"]
        x = np.tanh(x) if k < len(layers) - 1 else x
    return x


def gae(reward, value, next_value, terminated, done, gamma, lam):
    """CleanRL's backward GAE loop over one rollout ``(env, step)``, bootstrapping from ``next_value`` where
    an episode goes on or is truncated; the last step sees nothing of the next rollout."""
    adv = np.zeros_like(reward)
    for t in reversed(range(reward.shape[1])):
        delta = reward[:, t] + gamma * next_value[:, t] * (1.0 - terminated[:, t]) - value[:, t]
        later = adv[:, t + 1] if t + 1 < reward.shape[1] else 0.0
        adv[:, t] = delta + gamma * lam * (1.0 - done[:, t]) * later
    return adv


def parameters_at(run, at) -> dict:
    """The example's critic, actor and head parameters at the points ``at`` selects, by ``part.name``."""
    return {f"{part}.{name}": p[at] for part, module in (("critic", run.critic), ("actor", run.actor),
                                                         ("head", run.head))
            for name, p in module.named_parameters()}


def test_the_examples_rollout_table_is_cleanrls_for_its_policy_and_critic():
    """Each rollout's table (what the minibatches read): the log-probabilities and values the policy and critic
    give at that rollout's weights, and CleanRL's GAE over its normalised rewards with truncation bootstrap."""
    args = example.Args(env_id=ENV_ID, num_envs=NUM_ENVS, num_steps=16, update_epochs=2, num_minibatches=2,
                        total_timesteps=NUM_ENVS * 16 * ROLLOUTS, track_tensorboard=False)
    every, steps = args.update_epochs * args.num_minibatches, args.num_steps
    seen: dict[int, dict] = {}
    with tpo.Context(seed=args.seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        run = example.program(args, (b, i, t), 0, ROLLOUTS, max_episode_steps=LIMIT)
        at = (i % every) == 0
        parts = parameters_at(run, at)
        parts["table"] = run.table[at]
        for name, x in (("reward", run.reward), ("final", run.final), ("terminated", run.step.terminated),
                        ("done", run.step.done)):
            parts[name] = x[0:B, i, 0:T][at]
        sink_many(parts, lambda tensors, point: seen.__setitem__(point["i"], tensors))
        ctx.run({B: NUM_ENVS, I: ROLLOUTS * every, T: steps})
    assert sorted(seen) == [k * every for k in range(ROLLOUTS)]
    assert any(seen[k]["done"].any() for k in seen)
    n_obs = seen[0]["final"].shape[-1]
    for k, got in seen.items():
        weights = {name: np.asarray(x, np.float64) for name, x in got.items() if name.split(".")[0] in
                   ("critic", "actor", "head")}
        table = got["table"].astype(np.float64)
        obs, act = table[:, :n_obs], table[:, n_obs:n_obs + 6]
        logp, adv, ret, value = (table[:, n_obs + 6 + c] for c in range(4))
        std = np.exp(weights["head.log_std"])
        mean = mlp(weights, "actor", obs)
        np.testing.assert_allclose(logp, (-0.5 * ((act - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi))
                                   .sum(-1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(value, mlp(weights, "critic", obs)[:, 0], rtol=1e-5, atol=1e-6)
        rows = lambda x: x.reshape(NUM_ENVS, steps, *x.shape[1:])  # noqa: E731 (environment-major rows)
        done = got["done"]
        inside = ~done[:, :-1]
        np.testing.assert_array_equal(rows(obs)[:, 1:][inside], got["final"][:, :-1][inside].astype(np.float64))
        next_value = mlp(weights, "critic", got["final"].astype(np.float64))[..., 0]
        expected = gae(got["reward"].astype(np.float64), rows(value), next_value, got["terminated"], done,
                       args.gamma, args.gae_lambda)
        np.testing.assert_allclose(rows(adv), expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rows(ret), expected + rows(value), rtol=1e-4, atol=1e-5)


class CleanRLAgent(torch.nn.Module):
    """CleanRL's continuous agent (64-64 tanh critic and actor mean, ``actor_logstd``), loaded with Tempo's weights."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        n_obs, n_act = weights["actor.layers.0.weight"].shape[0], weights["head.log_std"].shape[0]
        tanh_mlp = lambda n_out: torch.nn.Sequential(  # noqa: E731
            torch.nn.Linear(n_obs, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
            torch.nn.Linear(64, n_out))
        self.critic, self.actor_mean = tanh_mlp(1), tanh_mlp(n_act)
        self.actor_logstd = torch.nn.Parameter(torch.zeros(1, n_act))
        with torch.no_grad():
            for part, seq in (("critic", self.critic), ("actor", self.actor_mean)):
                for k, linear in enumerate(seq[::2]):
                    linear.weight.copy_(torch.from_numpy(weights[f"{part}.layers.{k}.weight"].T.copy()))
                    linear.bias.copy_(torch.from_numpy(weights[f"{part}.layers.{k}.bias"]))
            self.actor_logstd.copy_(torch.from_numpy(weights["head.log_std"]).reshape(1, n_act))

    def weights(self) -> dict[str, np.ndarray]:
        out = {"head.log_std": self.actor_logstd.detach().numpy().reshape(-1).copy()}
        for part, seq in (("critic", self.critic), ("actor", self.actor_mean)):
            for k, linear in enumerate(seq[::2]):
                out[f"{part}.layers.{k}.weight"] = linear.weight.detach().numpy().T.copy()
                out[f"{part}.layers.{k}.bias"] = linear.bias.detach().numpy().copy()
        return out


def cleanrl_rollout_update(agent, table: np.ndarray, orders: list[np.ndarray], lr: float, args, n_obs: int,
                           n_act: int, optimizer=None):
    """CleanRL's update epochs over one rollout's table, with the given minibatch orders."""
    optimizer = optimizer or torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    optimizer.param_groups[0]["lr"] = lr
    tab = torch.from_numpy(table)
    obs, act = tab[:, :n_obs], tab[:, n_obs:n_obs + n_act]
    logp, adv, ret, value = (tab[:, n_obs + n_act + c] for c in range(4))
    for order in orders:
        mb = torch.from_numpy(order.astype(np.int64))
        mean = agent.actor_mean(obs[mb])
        dist = torch.distributions.Normal(mean, agent.actor_logstd.expand_as(mean).exp())
        ratio = (dist.log_prob(act[mb]).sum(1) - logp[mb]).exp()
        mb_adv = (adv[mb] - adv[mb].mean()) / (adv[mb].std() + 1e-8)
        pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
        new_value = agent.critic(obs[mb]).view(-1)
        clipped = value[mb] + (new_value - value[mb]).clamp(-args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((new_value - ret[mb]) ** 2, (clipped - ret[mb]) ** 2).mean()
        loss = pg_loss - args.ent_coef * dist.entropy().sum(1).mean() + v_loss * args.vf_coef
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
    return optimizer


@pytest.mark.slow
def test_the_examples_updates_on_its_halfcheetah_rollouts_are_cleanrls():
    """CleanRL's defaults (2048 steps, 10 epochs of 32 minibatches): CleanRL's update in torch, replayed on the
    example's own rollout tables from its weights with its minibatch orders, ends each rollout where Tempo's does
    (to 1e-4 of how far the weights moved); the second rollout's learning rate is annealed."""
    rollouts = 3
    args = example.Args(env_id=ENV_ID, total_timesteps=2048 * rollouts, track_tensorboard=False)
    every = args.update_epochs * args.num_minibatches
    weights, tables, orders = {}, {}, {}
    with tpo.Context(seed=args.seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        run = example.program(args, (b, i, t), 0, rollouts)
        named = {f"{part}.{name}": p for part, module in (("critic", run.critic), ("actor", run.actor),
                                                          ("head", run.head)) for name, p in module.named_parameters()}
        sink_many(named, lambda tensors, point: weights.__setitem__(point["i"], tensors))
        sink_many({"order": run.batches.order()},
                  lambda tensors, point: orders.__setitem__(point["i"], tensors["order"]))
        sink_many({"table": run.table[(i % every) == 0]},
                  lambda tensors, point: tables.__setitem__(point["i"], tensors["table"]))
        ctx.run({B: 1, I: rollouts * every, T: args.num_steps})
    n_obs, n_act = weights[0]["actor.layers.0.weight"].shape[0], weights[0]["head.log_std"].shape[0]
    agent, optimizer = CleanRLAgent(weights[0]), None
    for r in range(rollouts - 1):
        k = r * every
        lr = (1.0 - r / rollouts) * args.learning_rate
        optimizer = cleanrl_rollout_update(agent, tables[k], [orders[k + u] for u in range(every)], lr, args, n_obs,
                                           n_act, optimizer)
        for name, want in agent.weights().items():
            moved = np.abs(want - weights[k][name]).max()
            assert moved > 0.0, name
            assert np.abs(weights[k + every][name] - want).max() <= 1e-4 * moved, f"{name} after rollout {r}"
