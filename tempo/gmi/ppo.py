"""Synchronous PPO, written so data parallelism over instances is exact.

A *shard* is one instance's slice of the experience: its own vector of
environments and its own random generator. :func:`update` trains on the
shards a process holds and calls ``reduce_`` to sum gradient and statistics
tensors over processes. One process holding all N shards (``reduce_`` the
identity) and N instances holding one shard each (``reduce_`` an all-reduce)
compute the same loss (the mean over the union of the data) and so the same
parameters, up to float rounding.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tempo.gmi.envs import POLICY_HIDDEN, make_envs
from tempo.gmi.errors import GMIError

Reduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (per instance)."""

    env_id: str = "CartPole-v1"
    num_envs: int = 8            # environments per instance
    num_steps: int = 32          # steps per environment per rollout
    epochs: int = 2              # passes over each rollout
    minibatches: int = 2         # minibatches per pass
    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    hidden: tuple[int, ...] = POLICY_HIDDEN
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_envs", "num_steps", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise GMIError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_envs * self.num_steps < self.minibatches:
            raise GMIError(f"{self.num_envs} envs x {self.num_steps} steps cannot fill "
                           f"{self.minibatches} minibatches")


def mlp(sizes: list[int], out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        layer = nn.Linear(fan_in, fan_out)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(layer.weight, out_std if last else np.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers += [layer] if last else [layer, nn.Tanh()]
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs of the same hidden sizes."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: tuple[int, ...]):
        super().__init__()
        self.actor = mlp([obs_dim, *hidden, num_actions], 0.01)
        self.critic = mlp([obs_dim, *hidden, 1], 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.distributions.Categorical, torch.Tensor]:
        return torch.distributions.Categorical(logits=self.actor(obs)), self.critic(obs).squeeze(-1)


def make_policy(cfg: PPOConfig, obs_dim: int, num_actions: int) -> ActorCritic:
    """The policy every instance starts from (seeded, so identical everywhere)."""
    torch.manual_seed(cfg.seed)
    return ActorCritic(obs_dim, num_actions, cfg.hidden)


class Shard:
    """One instance's environments, generator and episode bookkeeping."""

    def __init__(self, cfg: PPOConfig, index: int, device: torch.device | str = "cpu"):
        self.cfg, self.device = cfg, torch.device(device)
        self.envs = make_envs(cfg.env_id, cfg.num_envs)
        obs, _ = self.envs.reset(seed=cfg.seed * 10_007 + index * cfg.num_envs)
        self.obs = self._tensor(obs)
        self.generator = torch.Generator().manual_seed(cfg.seed * 7_919 + index)
        self.running = np.zeros(cfg.num_envs)
        self.finished: list[float] = []

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.envs.single_observation_space.shape))

    @property
    def num_actions(self) -> int:
        return int(self.envs.single_action_space.n)

    @torch.no_grad()
    def collect(self, policy: ActorCritic) -> dict[str, torch.Tensor]:
        """Run ``num_steps`` steps; return flat obs, actions, log-probs, advantages, returns.

        The policy runs on the shard's device; actions are sampled on the host
        with the shard's generator, so a seed gives the same actions anywhere.
        """
        cfg, steps = self.cfg, []
        for _ in range(cfg.num_steps):
            dist, value = policy(self.obs)
            action = torch.multinomial(dist.probs.cpu(), 1, generator=self.generator).squeeze(-1)
            obs, reward, terminated, truncated, _ = self.envs.step(action.numpy())
            done = np.logical_or(terminated, truncated)
            self._track(reward, done)
            action = action.to(self.device)
            steps.append((self.obs, action, dist.log_prob(action), value,
                          self._tensor(reward), self._tensor(done)))
            self.obs = self._tensor(obs)
        obs, actions, logp, values, rewards, dones = (torch.stack(x) for x in zip(*steps))
        advantages = gae(rewards, values, dones, policy(self.obs)[1], cfg.gamma, cfg.gae_lambda)
        return {"obs": obs.flatten(0, 1), "actions": actions.flatten(), "logp": logp.flatten(),
                "advantages": advantages.flatten(), "returns": (advantages + values).flatten()}

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    def _track(self, reward: np.ndarray, done: np.ndarray) -> None:
        self.running += reward
        self.finished.extend(self.running[done].tolist())
        self.running[done] = 0.0

    def take_returns(self) -> list[float]:
        """Returns of the episodes finished since the last call."""
        finished, self.finished = self.finished, []
        return finished


def gae(rewards, values, dones, last_value, gamma: float, lam: float) -> torch.Tensor:
    """Generalized advantage estimates over a (steps, envs) rollout."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for t in reversed(range(rewards.shape[0])):
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
        next_value = values[t]
    return advantages


def update(policy: ActorCritic, optimizer: torch.optim.Optimizer, batches: list[dict],
           generators: list[torch.Generator], cfg: PPOConfig, reduce_: Reduce, world: int) -> None:
    """PPO epochs over the local shards' batches; gradients are summed with ``reduce_``.

    The loss is the mean over the union of every process's j-th minibatch:
    each process sums its local per-sample losses, and the sum over processes
    is divided by the global minibatch size.
    """
    mean, std = _advantage_stats(batches, reduce_)
    size = batches[0]["actions"].numel()
    per_minibatch = size // cfg.minibatches
    params = list(policy.parameters())
    for _ in range(cfg.epochs):
        orders = [torch.randperm(size, generator=g) for g in generators]
        for j in range(cfg.minibatches):
            picks = [order[j * per_minibatch:(j + 1) * per_minibatch] for order in orders]
            mb = {k: torch.cat([b[k][p] for b, p in zip(batches, picks)]) for k in batches[0]}
            mb["advantages"] = ((mb["advantages"].double() - mean) / std).float()
            loss = _loss(policy, mb, cfg).sum() / (per_minibatch * len(batches) * world)
            optimizer.zero_grad()
            loss.backward()
            flat = reduce_(torch.cat([p.grad.reshape(-1) for p in params]))
            _unflatten_into(flat, [p.grad for p in params])
            nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()


def _unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for tensor in tensors:
        tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()


def _advantage_stats(batches: list[dict], reduce_: Reduce) -> tuple[float, float]:
    adv = torch.cat([b["advantages"] for b in batches]).double()
    count = torch.tensor(float(adv.numel()), dtype=torch.float64, device=adv.device)
    sums = reduce_(torch.stack([adv.sum(), (adv * adv).sum(), count]).float()).double()
    mean = sums[0] / sums[2]
    return mean.item(), (sums[1] / sums[2] - mean * mean).clamp_min(0).sqrt().item() + 1e-8


def _loss(policy: ActorCritic, mb: dict, cfg: PPOConfig) -> torch.Tensor:
    """Per-sample PPO loss: clipped surrogate, value error, entropy bonus."""
    dist, value = policy(mb["obs"])
    ratio = (dist.log_prob(mb["actions"]) - mb["logp"]).exp()
    adv = mb["advantages"]
    surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip))
    value_loss = 0.5 * (value - mb["returns"]) ** 2
    return surrogate + cfg.vf_coef * value_loss - cfg.ent_coef * dist.entropy()


def make_optimizer(policy: ActorCritic, cfg: PPOConfig) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)


def train_reference(cfg: PPOConfig, shards: int, iterations: int) -> torch.Tensor:
    """One process over the union of ``shards`` instances' data; the final flat parameters."""
    local = [Shard(cfg, i) for i in range(shards)]
    policy = make_policy(cfg, local[0].obs_dim, local[0].num_actions)
    optimizer = make_optimizer(policy, cfg)
    for _ in range(iterations):
        batches = [shard.collect(policy) for shard in local]
        update(policy, optimizer, batches, [s.generator for s in local], cfg, lambda t: t, 1)
    return nn.utils.parameters_to_vector(policy.parameters()).detach()
