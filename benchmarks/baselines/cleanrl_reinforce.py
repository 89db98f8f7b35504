"""CleanRL-style REINFORCE in PyTorch on tempo/Synthetic-v0: the baseline of ``benchmarks/rl_train.py``.

The algorithm of ``examples/reinforce.py`` (Monte-Carlo returns), written in
the style of CleanRL: an eager acting loop stores the batch (observations,
actions, rewards, dones) for ``steps`` timesteps of ``envs`` environments,
the discounted returns run backwards over the stored rewards, and the update
replays the forward pass over the whole batch and backpropagates. Same
network, initialisation, hyper-parameters, loss (returns standardised per
timestep over the batch, masked after each episode's end) and Adam with a
decaying learning rate as the Tempo program.

    .venv/bin/python benchmarks/baselines/cleanrl_reinforce.py --iterations 5 --envs 512 --steps 250
"""
from __future__ import annotations

import math
import time

import torch

import synthetic_env
from args import ReinforceArgs as Args
from torch_nets import mlp


def main(args: Args) -> dict:
    """Train; returns the mean episode return and the loss of every batch, and the timings."""
    # ----- setup -----
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    obs_shape = tuple(int(n) for n in args.obs_shape.split(","))
    obs_size, B, T = math.prod(obs_shape), args.envs, args.steps
    pattern = torch.from_numpy(synthetic_env.pattern(obs_shape))
    policy = mlp([obs_size, *[args.hidden] * args.layers, args.num_actions], last_init_scale=0.01)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr, eps=1e-8)

    # ----- storage for one batch -----
    obs = torch.zeros((T, B, obs_size))
    actions = torch.zeros((T, B), dtype=torch.long)
    rewards = torch.zeros((T, B))
    dones = torch.zeros((T, B), dtype=torch.bool)

    returns, losses, ends = [], [], []  # ends: when each iteration finished
    start = time.perf_counter()
    for iteration in range(args.iterations):
        # ----- acting: fresh episodes, the current policy -----
        state = torch.randint(0, args.num_actions, (B,), generator=rng)
        ended = torch.zeros(B, dtype=torch.bool)
        with torch.no_grad():
            for t in range(T):
                obs[t] = synthetic_env.observe(pattern, state, args.num_actions).reshape(B, -1)
                actions[t] = torch.distributions.Categorical(logits=policy(obs[t])).sample()
                state, rewards[t], ended = synthetic_env.step(torch, state, ended, actions[t], t,
                                                              args.num_actions, T)
                dones[t] = ended

        # ----- Monte-Carlo returns, standardised per timestep over the batch -----
        with torch.no_grad():
            alive = torch.cat([torch.ones((1, B)), 1.0 - dones[:-1].float()])
            discounted = torch.zeros_like(rewards)
            last = torch.zeros(B)
            for t in reversed(range(T)):
                last = rewards[t] + args.gamma * last
                discounted[t] = last
            baseline = discounted.mean(1, keepdim=True)
            spread = ((discounted - baseline) ** 2).mean(1, keepdim=True).sqrt() + 1e-6
            advantages = (discounted - baseline) / spread

        # ----- learning: one update replaying the forward pass -----
        optimizer.param_groups[0]["lr"] = args.lr * args.lr_decay ** iteration
        logp = torch.distributions.Categorical(logits=policy(obs)).log_prob(actions)
        loss = -(logp * advantages * alive).sum() / alive.sum()
        optimizer.zero_grad()
        loss.backward()
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
