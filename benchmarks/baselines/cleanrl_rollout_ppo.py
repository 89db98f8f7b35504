"""CleanRL-style rollout PPO in PyTorch: the baseline of ``benchmarks/rl_learning.py``.

The algorithm of ``examples/ppo.py`` (discrete actions) and
``examples/ppo_continuous.py`` (Box actions), written the way CleanRL's
``ppo.py`` and ``ppo_continuous_action.py`` are: a gymnasium
``SyncVectorEnv`` in same-step autoreset mode, an eager acting loop that
stores ``num_steps`` steps of ``num_envs`` environments, GAE over the
stored rollout, then ``update_epochs`` epochs of ``num_minibatches``
shuffled minibatches with the clipped surrogate, clipped value loss,
entropy bonus, global grad-norm clipping and linear learning-rate annealing.
Same flags and defaults as the Tempo examples. One deliberate difference
from CleanRL's file, shared with the Tempo examples: a truncated episode
bootstraps from the value of its final observation (``--no-bootstrap-
truncation`` restores CleanRL's behaviour). Continuous runs use CleanRL's
wrappers (actions clipped to the bounds, observations and rewards
normalised and clipped); episodic returns are the raw rewards'.

    .venv/bin/python benchmarks/baselines/cleanrl_rollout_ppo.py --env-id CartPole-v1 --total-timesteps 500000
"""
from __future__ import annotations

import argparse
import json
import time

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import nn


def layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(n_in: int, n_out: int, last_gain: float) -> nn.Sequential:
    g = float(np.sqrt(2))
    return nn.Sequential(layer(n_in, 64, g), nn.Tanh(), layer(64, 64, g), nn.Tanh(), layer(64, n_out, last_gain))


class Agent(nn.Module):
    def __init__(self, n_obs: int, n_actions: int, continuous: bool):
        super().__init__()
        self.continuous = continuous
        self.critic = mlp(n_obs, 1, 1.0)
        self.actor = mlp(n_obs, n_actions, 0.01)
        if continuous:
            self.log_std = nn.Parameter(torch.zeros(1, n_actions))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def dist(self, x: torch.Tensor):
        if not self.continuous:
            return torch.distributions.Categorical(logits=self.actor(x))
        mean = self.actor(x)
        return torch.distributions.Normal(mean, self.log_std.expand_as(mean).exp())


def log_prob(dist, action: torch.Tensor, continuous: bool) -> torch.Tensor:
    return dist.log_prob(action).sum(-1) if continuous else dist.log_prob(action)


def entropy(dist, continuous: bool) -> torch.Tensor:
    return dist.entropy().sum(-1) if continuous else dist.entropy()


def make_env(env_id: str, gamma: float, clip_action: bool = True):
    """CleanRL's wrappers, in its order: with Box actions, observations flattened, episode statistics on the raw
    rewards, actions clipped (unless ``clip_action`` is False), observations and rewards normalised and clipped to
    [-10, 10]; with discrete actions, episode statistics only."""
    def thunk():
        env = gymnasium.make(env_id)
        continuous = isinstance(env.action_space, gymnasium.spaces.Box)
        if continuous:
            env = gymnasium.wrappers.FlattenObservation(env)
        env = gymnasium.wrappers.RecordEpisodeStatistics(env)
        if continuous:
            if clip_action:
                env = gymnasium.wrappers.ClipAction(env)
            env = gymnasium.wrappers.NormalizeObservation(env)
            env = gymnasium.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
            env = gymnasium.wrappers.NormalizeReward(env, gamma=gamma)
            env = gymnasium.wrappers.TransformReward(env, lambda r: np.clip(r, -10, 10))
        return env
    return thunk


def make_envs(args) -> gymnasium.vector.SyncVectorEnv:
    return gymnasium.vector.SyncVectorEnv([make_env(args.env_id, args.gamma) for _ in range(args.num_envs)],
                                          autoreset_mode=AutoresetMode.SAME_STEP)


def main(args) -> dict:
    """Train; returns every finished episode (global step, return, length, wall s, CPU s) and the timings."""
    np.random.seed(args.seed)  # the minibatch shuffles, seeded as CleanRL's ppo.py seeds them
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    envs = make_envs(args)
    continuous = isinstance(envs.single_action_space, gymnasium.spaces.Box)
    n_obs = int(np.prod(envs.single_observation_space.shape))
    n_act = int(envs.single_action_space.shape[0]) if continuous else int(envs.single_action_space.n)
    agent = Agent(n_obs, n_act, continuous)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    N, T = args.num_envs, args.num_steps
    obs = torch.zeros((T, N, n_obs))
    actions = torch.zeros((T, N, n_act) if continuous else (T, N), dtype=torch.float32 if continuous else torch.long)
    logprobs, rewards, values = (torch.zeros((T, N)) for _ in range(3))
    finals = torch.zeros((T, N, n_obs))  # each step's observation before any reset
    terminated, dones = torch.zeros((T, N)), torch.zeros((T, N))
    episodes = []
    started, cpu_started, global_step = time.perf_counter(), time.process_time(), 0
    seeds = [int(np.random.SeedSequence([args.seed, b]).generate_state(1)[0]) for b in range(N)]
    next_obs = torch.tensor(envs.reset(seed=seeds)[0], dtype=torch.float32)
    for iteration in range(num_iterations):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - iteration / num_iterations) * args.learning_rate
        # ----- rollout -----
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            with torch.no_grad():
                dist = agent.dist(next_obs)
                action = dist.sample()
                logprobs[step] = log_prob(dist, action, continuous)
                values[step] = agent.value(next_obs)
            actions[step] = action
            sent = action.numpy()
            raw_obs, reward, term, trunc, info = envs.step(sent)
            final = np.array(raw_obs, dtype=np.float32)
            if "_final_obs" in info:
                for k in np.flatnonzero(info["_final_obs"]):
                    final[k] = info["final_obs"][k]
            finals[step] = torch.tensor(final)
            done = np.logical_or(term, trunc)
            rewards[step] = torch.tensor(reward, dtype=torch.float32)
            terminated[step] = torch.tensor(term if args.bootstrap_truncation else done, dtype=torch.float32)
            dones[step] = torch.tensor(done, dtype=torch.float32)
            next_obs = torch.tensor(raw_obs, dtype=torch.float32)
            ended = info.get("final_info", {})  # same-step autoreset: the ending step's info
            for k in np.flatnonzero(ended.get("_episode", [])):
                episodes.append((global_step, float(ended["episode"]["r"][k]), int(ended["episode"]["l"][k]),
                                 time.perf_counter() - started, time.process_time() - cpu_started))
        # ----- GAE, bootstrapping from the value of each step's final observation -----
        with torch.no_grad():
            next_values = agent.value(finals)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(N)
            for t in reversed(range(T)):
                delta = rewards[t] + args.gamma * next_values[t] * (1.0 - terminated[t]) - values[t]
                last = delta + args.gamma * args.gae_lambda * (1.0 - dones[t]) * (last if t < T - 1 else 0.0)
                advantages[t] = last
            returns = advantages + values
        # ----- minibatch epochs -----
        b_obs, b_logprobs, b_adv = obs.reshape(-1, n_obs), logprobs.reshape(-1), advantages.reshape(-1)
        b_actions = actions.reshape((-1, n_act) if continuous else (-1,))
        b_returns, b_values = returns.reshape(-1), values.reshape(-1)
        for epoch in range(args.update_epochs):
            order = np.random.permutation(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb = order[start:start + minibatch_size]
                dist = agent.dist(b_obs[mb])
                new_logprob = log_prob(dist, b_actions[mb], continuous)
                log_ratio = new_logprob - b_logprobs[mb]
                ratio = log_ratio.exp()
                mb_adv = b_adv[mb]
                if args.norm_adv:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef))
                new_value = agent.value(b_obs[mb])
                v_loss = (new_value - b_returns[mb]) ** 2
                if args.clip_vloss:
                    clipped = b_values[mb] + (new_value - b_values[mb]).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = torch.max(v_loss, (clipped - b_returns[mb]) ** 2)
                loss = pg_loss.mean() - args.ent_coef * entropy(dist, continuous).mean() + \
                    args.vf_coef * 0.5 * v_loss.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    envs.close()
    final = float(np.mean([e[1] for e in episodes[-20:]])) if episodes else float("nan")
    print(f"episodic_return={final:.2f} global_step={global_step} sps={global_step / seconds:.0f}")
    return {"episodic_return": final, "global_step": global_step, "sps": global_step / seconds,
            "seconds": seconds, "cpu_seconds": cpu, "episodes": [list(e) for e in episodes]}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    flags = dict(env_id="CartPole-v1", seed=1, total_timesteps=500000, learning_rate=2.5e-4, num_envs=4,
                 num_steps=128, gamma=0.99, gae_lambda=0.95, num_minibatches=4, update_epochs=4, clip_coef=0.2,
                 ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)  # ppo.py's; rl_learning.py passes the continuous ones
    for name, default in flags.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    for name in ("anneal_lr", "norm_adv", "clip_vloss", "bootstrap_truncation"):
        p.add_argument(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=True)
    return p.parse_args(argv)


if __name__ == "__main__":
    summary = main(parse())
    print("EPISODES " + json.dumps({k: summary[k] for k in ("episodes", "global_step", "sps", "seconds",
                                                           "cpu_seconds")}))
