"""CleanRL-style PPO in PyTorch on tempo/Synthetic-v0: the baseline of ``benchmarks/rl_train.py``.

The algorithm of ``examples/ppo_fixed_horizon.py``, written the way CleanRL writes PPO: an
eager acting loop stores the batch (observations, actions, log-probabilities,
values, rewards, dones) for ``steps`` timesteps of ``envs`` environments, GAE
runs over the stored batch, and each update replays the forward pass over the
whole batch and backpropagates. Same network, initialisation,
hyper-parameters, loss, Adam with ``max_grad_norm=0.5`` and linear learning
rate annealing as the Tempo program.

    .venv/bin/python benchmarks/baselines/cleanrl_ppo.py --iterations 5 --envs 512 --steps 250
"""
from __future__ import annotations

import math
import time

import torch
from torch import nn

import synthetic_env
from args import PPOArgs as Args
from torch_nets import mlp


class Agent(nn.Module):
    def __init__(self, obs_size: int, num_actions: int, hidden: int, layers: int):
        super().__init__()
        self.actor = mlp([obs_size, *[hidden] * layers, num_actions], last_init_scale=0.01)
        self.critic = mlp([obs_size, *[hidden] * layers, 1])

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def dist(self, x: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.actor(x))


def main(args: Args) -> dict:
    """Train; returns the mean episode return and the loss of every batch, and the timings."""
    # ----- setup -----
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    obs_shape = tuple(int(n) for n in args.obs_shape.split(","))
    obs_size, B, T = math.prod(obs_shape), args.envs, args.steps
    pattern = torch.from_numpy(synthetic_env.pattern(obs_shape))
    agent = Agent(obs_size, args.num_actions, args.hidden, args.layers)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-8)
    updates = args.iterations * args.epochs

    # ----- storage for one batch -----
    obs = torch.zeros((T, B, obs_size))
    actions = torch.zeros((T, B), dtype=torch.long)
    logprobs = torch.zeros((T, B))
    values = torch.zeros((T, B))
    rewards = torch.zeros((T, B))
    dones = torch.zeros((T, B), dtype=torch.bool)

    returns, losses, ends = [], [], []  # ends: when each iteration finished
    start = time.perf_counter()
    for iteration in range(args.iterations):
        # ----- acting: fresh episodes, the current policy -----
        state = torch.randint(0, args.num_actions, (B,), generator=rng)
        ended = torch.zeros(B, dtype=torch.bool)
        next_obs = synthetic_env.observe(pattern, state, args.num_actions).reshape(B, -1)
        with torch.no_grad():
            for t in range(T):
                obs[t] = next_obs
                dist = agent.dist(next_obs)
                action = dist.sample()
                actions[t], logprobs[t], values[t] = action, dist.log_prob(action), agent.value(next_obs)
                state, rewards[t], ended = synthetic_env.step(torch, state, ended, action, t, args.num_actions, T)
                dones[t] = ended
                next_obs = synthetic_env.observe(pattern, state, args.num_actions).reshape(B, -1)

        # ----- GAE (no bootstrap after the last step; nothing after an episode's end) -----
        with torch.no_grad():
            live = 1.0 - dones.float()
            alive = torch.cat([torch.ones((1, B)), live[:-1]])
            next_values = torch.cat([values[1:], torch.zeros((1, B))])
            delta = (rewards + args.gamma * live * next_values - values) * alive
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(B)
            for t in reversed(range(T)):
                last = delta[t] + args.gamma * args.lam * live[t] * last
                advantages[t] = last
            targets = advantages + values * alive

        # ----- learning: full-batch updates replaying the forward pass -----
        for epoch in range(args.epochs):
            update = iteration * args.epochs + epoch
            optimizer.param_groups[0]["lr"] = args.lr * (1.0 - update / updates)
            dist = agent.dist(obs)
            mask = alive
            mean = (advantages * mask).sum() / mask.sum()
            spread = (((advantages - mean) ** 2 * mask).sum() / mask.sum()).sqrt() + 1e-8
            adv = (advantages - mean) / spread
            ratio = (dist.log_prob(actions) - logprobs).exp()
            clipped = ratio.clamp(1.0 - args.clip, 1.0 + args.clip)
            surrogate = torch.maximum(-adv * ratio, -adv * clipped)
            per_step = (surrogate + args.value_coef * (agent.value(obs) - targets) ** 2
                        - args.entropy_coef * dist.entropy())
            loss = (per_step * mask).sum() / mask.sum()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()

        # ----- reporting -----
        returns.append(float(rewards.sum(0).mean()))
        losses.append(loss.item())
        ends.append(time.perf_counter())
    return {"returns": returns, "losses": losses, "compile_s": 0.0, "start": start, "ends": ends}


if __name__ == "__main__":
    import tempo.rl.training

    out = main(tempo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
    seconds = out["ends"][-1] - out["start"]
    print(f"mean_return={out['returns'][-1]:.1f} loss={out['losses'][-1]:.4f} seconds={seconds:.2f}")
