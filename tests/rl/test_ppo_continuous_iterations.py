"""examples/ppo_continuous.py's whole iterations against CleanRL's loop replayed in torch.

Tempo runs the example on HalfCheetah-v5 (two environments, episodes cut
short so that truncations fall inside and across rollouts) for a few
iterations, each a rollout and its minibatch epochs. Torch then runs
CleanRL's ``ppo_continuous_action.py`` loop on its own: the baseline's
wrappers in a same-step autoreset ``SyncVectorEnv`` reset with the same
seeds, CleanRL's agent started from the example's initial weights, storage
shaped ``(num_steps, num_envs)``, the value and log-probability of each
step, GAE over the rollout, the learning rate annealed per iteration, and
one Adam for the whole run. It takes from Tempo only what the two draw from
different generators: the action of every step and the minibatch orders.
Every rollout's observations, log-probabilities, values, advantages and
returns, and the weights after every iteration, must agree; the action
noise Tempo drew (recovered from its table) must be standard normal.

The initial weights are checked apart, against torch's own initialisation
of CleanRL's layers, over many seeds.
"""
from __future__ import annotations

import contextlib
import functools

import gymnasium
import numpy as np
import pytest
import torch
from scipy import stats

import tempo as tpo
from tempo.api.sinks import sink_many
from tempo.ir.ops import ConstOp
from tests.rl.test_ppo_continuous_rollout import (CleanRLAgent, baseline, example, make_limited, mlp,
                                                  parameters_at)

pytest.importorskip("mujoco")

ENV_ID, LIMIT, NUM_ENVS, NUM_STEPS, ITERATIONS = "HalfCheetah-v5", 150, 2, 128, 3


def tempo_run(args, iterations: int, limit: int = LIMIT):
    """The example for ``iterations`` rollouts (episodes cut at ``limit`` steps): each rollout's starting
    weights and table, every update's minibatch order, and the environments' reset seeds."""
    every = args.update_epochs * args.num_minibatches
    weights, tables, orders = {}, {}, {}
    with tpo.Context(seed=args.seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        run = example.program(args, (b, i, t), 0, iterations, max_episode_steps=limit)
        at = (i % every) == 0
        named = parameters_at(run, at)
        sink_many(named, lambda tensors, point: weights.__setitem__(point["i"] // every, tensors))
        sink_many({"table": run.table[at]}, lambda tensors, point: tables.__setitem__(point["i"] // every,
                                                                                     tensors["table"]))
        sink_many({"order": run.batches.order()},
                  lambda tensors, point: orders.__setitem__(point["i"], tensors["order"]))
        ctx.run({B: args.num_envs, I: iterations * every, T: args.num_steps})
        seeds = [run.env.reset_seed(k) for k in range(args.num_envs)]
    return weights, tables, [orders[k] for k in sorted(orders)], seeds


def limited(make, limit: int = LIMIT):
    """The baseline's environment thunk, its episodes cut at ``limit`` steps (:func:`make_limited`)."""
    return functools.partial(make_limited, make, limit)


def cleanrl_loop(init: dict, seeds: list[int], actions: np.ndarray, orders: list[np.ndarray], args,
                 iterations: int, num_iterations: int, limit: int = LIMIT) -> list[dict]:
    """CleanRL's ``ppo_continuous_action.py`` loop in torch from ``init``: ``iterations`` of a run of
    ``num_iterations``, stepping ``actions[r, t, n]`` and training on the minibatches ``orders`` (rows of the
    rollout flattened environment-major, as Tempo's table).

    Per rollout: what it stored (flattened environment-major) and the weights after its update."""
    N, T = args.num_envs, args.num_steps
    envs = gymnasium.vector.SyncVectorEnv([limited(baseline.make_env(ENV_ID, args.gamma), limit)] * N,
                                          autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    agent = CleanRLAgent(init)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    n_obs, n_act = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    obs, finals = torch.zeros((T, N, n_obs)), torch.zeros((T, N, n_obs))
    acts = torch.zeros((T, N, n_act))
    logprobs, rewards, values, terminated, dones = (torch.zeros((T, N)) for _ in range(5))
    next_obs = torch.tensor(envs.reset(seed=seeds)[0], dtype=torch.float32)
    every, out = args.update_epochs * args.num_minibatches, []
    for iteration in range(1, iterations + 1):
        frac = 1.0 - (iteration - 1.0) / num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        for step in range(T):
            obs[step] = next_obs
            with torch.no_grad():
                mean = agent.actor_mean(next_obs)
                dist = torch.distributions.Normal(mean, agent.actor_logstd.expand_as(mean).exp())
                action = torch.from_numpy(actions[iteration - 1, step])
                logprobs[step] = dist.log_prob(action).sum(1)
                values[step] = agent.critic(next_obs).view(-1)
            acts[step] = action
            raw, reward, term, trunc, info = envs.step(action.numpy())
            final = np.array(raw, dtype=np.float32)
            for k in np.flatnonzero(info.get("_final_obs", [])):
                final[k] = info["final_obs"][k]
            finals[step] = torch.from_numpy(final)
            rewards[step] = torch.tensor(reward, dtype=torch.float32)
            done = np.logical_or(term, trunc)
            terminated[step] = torch.tensor(term, dtype=torch.float32)
            dones[step] = torch.tensor(done, dtype=torch.float32)
            next_obs = torch.tensor(raw, dtype=torch.float32)
        with torch.no_grad():  # GAE over the rollout
            if args.bootstrap_truncation:  # the baseline's: from the final observation's value, unless terminated
                next_values, nonterminal = agent.critic(finals).squeeze(-1), 1.0 - terminated
            else:  # CleanRL's file: from the next step's value (the last step's: the observation reached)
                next_values = torch.cat([values[1:], agent.critic(next_obs).view(1, N)])
                nonterminal = 1.0 - dones
            advantages, last = torch.zeros_like(rewards), torch.zeros(N)
            for t in reversed(range(T)):
                delta = rewards[t] + args.gamma * next_values[t] * nonterminal[t] - values[t]
                last = delta + args.gamma * args.gae_lambda * (1.0 - dones[t]) * (last if t < T - 1 else 0.0)
                advantages[t] = last
            returns = advantages + values
        env_major = lambda x: x.transpose(0, 1).reshape(N * T, *x.shape[2:])  # noqa: E731 (Tempo's row order)
        b_obs, b_act, b_logp, b_adv, b_ret, b_val = map(env_major, (obs, acts, logprobs, advantages, returns, values))
        stored = {"obs": b_obs.numpy().copy(), "logp": b_logp.numpy().copy(), "adv": b_adv.numpy().copy(),
                  "ret": b_ret.numpy().copy(), "value": b_val.numpy().copy()}
        for u in range(every):
            mb = torch.from_numpy(orders[(iteration - 1) * every + u].astype(np.int64))
            mean = agent.actor_mean(b_obs[mb])
            dist = torch.distributions.Normal(mean, agent.actor_logstd.expand_as(mean).exp())
            logratio = dist.log_prob(b_act[mb]).sum(1) - b_logp[mb]
            ratio = logratio.exp()
            mb_adv = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef,
                                                                        1 + args.clip_coef)).mean()
            new_value = agent.critic(b_obs[mb]).view(-1)
            v_unclipped = (new_value - b_ret[mb]) ** 2
            v_clipped = b_val[mb] + torch.clamp(new_value - b_val[mb], -args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_ret[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * dist.entropy().sum(1).mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        out.append({"stored": stored, "episode_ends": int(dones.sum()), "weights": agent.weights()})
    envs.close()
    return out


@contextlib.contextmanager
def one_torch_thread():
    """Torch at one thread (the replay's products are tiny: more threads only wait for each other)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def noise(weights: dict, table: np.ndarray, n_obs: int, n_act: int) -> np.ndarray:
    """The standard normal numbers a rollout's actions were drawn with: ``(action - mean) / std``."""
    w = {name: np.asarray(x, np.float64) for name, x in weights.items()}
    obs, act = table[:, :n_obs].astype(np.float64), table[:, n_obs:n_obs + n_act].astype(np.float64)
    return (act - mlp(w, "actor", obs)) / np.exp(w["head.log_std"])


@pytest.mark.parametrize("bootstrap_truncation", [True, False])
def test_whole_iterations_match_cleanrls_loop_from_the_same_weights(bootstrap_truncation):
    """Per rollout: the observations, log-probabilities, values, advantages and returns stored, and the weights
    after the update. Tempo runs one rollout more than the replay: its weights are those after the last update."""
    args = example.Args(env_id=ENV_ID, num_envs=NUM_ENVS, num_steps=NUM_STEPS, update_epochs=2, num_minibatches=4,
                        total_timesteps=NUM_ENVS * NUM_STEPS * (ITERATIONS + 1), track_tensorboard=False,
                        bootstrap_truncation=bootstrap_truncation)
    weights, tables, orders, seeds = tempo_run(args, ITERATIONS + 1)
    n_obs, n_act = weights[0]["actor.layers.0.weight"].shape[0], weights[0]["head.log_std"].shape[0]
    acts = np.stack([tables[r][:, n_obs:n_obs + n_act].reshape(NUM_ENVS, NUM_STEPS, n_act).swapaxes(0, 1)
                     for r in range(ITERATIONS)])
    z = np.concatenate([noise(weights[r], tables[r], n_obs, n_act) for r in range(ITERATIONS)])
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-3
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1.0) < 0.05

    with one_torch_thread():
        replay = cleanrl_loop(weights[0], seeds, acts, orders, args, ITERATIONS, ITERATIONS + 1)
    assert [r["episode_ends"] for r in replay] == [0, NUM_ENVS, NUM_ENVS]  # truncated at LIMIT steps
    for r, theirs in enumerate(replay):
        table, stored = tables[r], theirs["stored"]
        np.testing.assert_allclose(table[:, :n_obs], stored["obs"], rtol=1e-5, atol=1e-6, err_msg=f"obs {r}")
        columns = {name: table[:, n_obs + n_act + c] for c, name in enumerate(("logp", "adv", "ret", "value"))}
        for name, got in columns.items():
            scale = np.abs(stored[name]).max()
            np.testing.assert_allclose(got, stored[name], atol=1e-4 * scale, err_msg=f"{name}, rollout {r}")
        for name, want in theirs["weights"].items():
            moved = np.abs(want - weights[r][name]).max()
            assert moved > 0.0, name
            assert np.abs(weights[r + 1][name] - want).max() <= 1e-3 * moved, f"{name} after rollout {r}"


def initial_value(p: tpo.RecurrentTensor) -> np.ndarray:
    """A parameter's value at ``i = 0``: the constant its first point reads."""
    sdg = p.ctx.sdg
    (value,) = [sdg.nodes[e.src].op.value.array for e in sdg.in_edges(p.node.id)
                if isinstance(sdg.nodes[e.src].op, ConstOp)]
    return np.asarray(value, np.float64)


def example_initial_weights(seed: int) -> dict[str, np.ndarray]:
    """The example's initial weights at ``seed`` (the program built, not run), in torch's layout."""
    args = example.Args(env_id=ENV_ID, num_envs=1, num_steps=4, update_epochs=1, num_minibatches=1,
                        total_timesteps=4, track_tensorboard=False, seed=seed)
    with tpo.Context(seed=seed) as ctx:
        run = example.program(args, tuple(d for d, _ in ctx.dims("b", "i", "t")), 0, 1)
        named = {f"{part}.{name}": initial_value(p) for part, module in (("critic", run.critic),
                                                                         ("actor", run.actor), ("head", run.head))
                 for name, p in module.named_parameters()}
    return {name: x.T if x.ndim == 2 else x for name, x in named.items()}


def cleanrl_initial_weights(seed: int, n_obs: int, n_act: int) -> dict[str, np.ndarray]:
    """CleanRL's ``layer_init``: torch's orthogonal weight with gain sqrt(2) for hidden layers, 0.01 for the
    actor's mean and 1.0 for the critic's output, zero biases; ``actor_logstd`` zeros."""
    torch.manual_seed(seed)
    out = {"head.log_std": np.zeros(n_act)}
    for part, n_out, last in (("critic", 1, 1.0), ("actor", n_act, 0.01)):
        for k, (n_in, m, gain) in enumerate(((n_obs, 64, np.sqrt(2)), (64, 64, np.sqrt(2)), (64, n_out, last))):
            linear = torch.nn.Linear(n_in, m)
            torch.nn.init.orthogonal_(linear.weight, gain)
            torch.nn.init.constant_(linear.bias, 0.0)
            out[f"{part}.layers.{k}.weight"] = linear.weight.detach().numpy().astype(np.float64)
            out[f"{part}.layers.{k}.bias"] = linear.bias.detach().numpy().astype(np.float64)
    return out


def test_initial_weights_are_distributed_as_cleanrls():
    """Per layer over 16 seeds: the same shapes, zero biases and log std, the same singular values (the gain,
    min(rows, cols) times), and the entries, row norms and column norms drawn from the same distribution."""
    seeds = range(1, 17)
    ours = [example_initial_weights(s) for s in seeds]
    n_obs, n_act = ours[0]["actor.layers.0.weight"].shape[1], ours[0]["head.log_std"].shape[0]
    theirs = [cleanrl_initial_weights(s, n_obs, n_act) for s in seeds]
    assert sorted(ours[0]) == sorted(theirs[0])
    for name in ours[0]:
        a, b = np.stack([w[name] for w in ours]), np.stack([w[name] for w in theirs])
        assert a.shape == b.shape, name
        if not name.endswith("weight"):
            np.testing.assert_array_equal(a, 0.0, err_msg=name)
            continue
        np.testing.assert_allclose(np.linalg.svd(a, compute_uv=False), np.linalg.svd(b, compute_uv=False),
                                   rtol=1e-6, err_msg=name)
        for what, x, y in (("entries", a, b), ("row norms", np.linalg.norm(a, axis=2), np.linalg.norm(b, axis=2)),
                           ("column norms", np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1))):
            if np.ptp(y) > 1e-6:  # norms that orthogonality fixes are equal above
                assert stats.ks_2samp(x.ravel(), y.ravel()).pvalue > 1e-3, f"{name} {what}"
    first = np.stack([w["actor.layers.0.weight"] for w in ours])
    assert len({float(x) for x in first[:, 0, 0]}) == len(seeds)  # each seed its own draw


def weight_gap(ours: dict, theirs: dict, before: dict) -> float:
    """The largest difference between two sets of weights, relative to how far ``theirs`` moved from ``before``."""
    return max(float(np.abs(np.asarray(ours[k]) - v).max() / np.abs(v - np.asarray(before[k])).max())
               for k, v in theirs.items())


@pytest.mark.slow
def test_full_size_iterations_drift_from_cleanrls_loop_only_as_rounding_does():
    """At ``ppo_continuous_action.py``'s size (one environment, 2048 steps, 10 epochs of 32 minibatches, episodes
    of 1000 steps) over 8 iterations, Tempo's weights stay within 100 times the gap between the replay and the
    replay from weights perturbed by 1e-7: what float32 rounding alone grows to, each gap relative to how far
    the replay's weights moved in that iteration. A difference in the algorithm (a 1% higher rate, say)
    opens a gap of about 6e-2 at the first iteration, where rounding's is about 1e-5."""
    iterations, limit = 8, 1000
    args = example.Args(env_id=ENV_ID, num_envs=1, num_steps=2048, update_epochs=10, num_minibatches=32,
                        total_timesteps=2048 * (iterations + 1), track_tensorboard=False)
    weights, tables, orders, seeds = tempo_run(args, iterations + 1, limit)
    n_obs, n_act = weights[0]["actor.layers.0.weight"].shape[0], weights[0]["head.log_std"].shape[0]
    acts = np.stack([tables[r][:, n_obs:n_obs + n_act].reshape(1, 2048, n_act).swapaxes(0, 1)
                     for r in range(iterations)])
    rng = np.random.default_rng(0)
    perturbed = {k: (np.asarray(v) * (1.0 + 1e-7 * rng.standard_normal(np.shape(v)))).astype(np.asarray(v).dtype)
                 for k, v in weights[0].items()}
    with one_torch_thread():
        replay = cleanrl_loop(weights[0], seeds, acts, orders, args, iterations, iterations + 1, limit)
        control = cleanrl_loop(perturbed, seeds, acts, orders, args, iterations, iterations + 1, limit)
    assert [r["episode_ends"] for r in replay] == [2] * iterations
    for r in range(iterations):
        before = weights[0] if r == 0 else replay[r - 1]["weights"]
        ours = weight_gap(weights[r + 1], replay[r]["weights"], before)
        rounding = weight_gap(control[r]["weights"], replay[r]["weights"], before)
        assert 0.0 < rounding and ours <= 100.0 * rounding, (r, ours, rounding)
