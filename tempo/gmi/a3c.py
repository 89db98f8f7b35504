"""Asynchronous advantage actor-critic over agent and trainer instances (TDG_EX).

Agent instances (simulator + agent) roll out with a copy of the policy, on
their share's device, that they refresh from host shared memory, and ship
experience through channels.
Trainer instances take batches as they come and update the shared parameters
in place (Hogwild-style, as in A3C), so agents see new weights at their next
rollout without any message.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from tempo.gmi import checkpoint
from tempo.gmi.channels import ExperienceService, LoadTable, Migrator, receive
from tempo.gmi.comm import GMIContext
from tempo.gmi.envs import make_envs
from tempo.gmi.ppo import ActorCritic, PPOConfig, Shard, make_optimizer, make_policy
from tempo.gmi.roles import Role, peak_memory_mb


class _A3CRole(Role):
    def __init__(self, ctx: GMIContext, config: dict, agents: list[int], trainers: list[int],
                 seconds: float, batch_rollouts: int = 2, checkpoint_every: int = 0):
        super().__init__(ctx)
        self.cfg = PPOConfig(**config)
        self.agents, self.trainers = agents, trainers
        self.seconds, self.checkpoint_every = seconds, checkpoint_every
        self.rows = batch_rollouts * self.cfg.num_envs * self.cfg.num_steps
        probe = make_envs(self.cfg.env_id, 1)
        self.obs_shape = probe.single_observation_space.shape
        self.policy = make_policy(self.cfg, int(np.prod(self.obs_shape)),
                                  int(probe.single_action_space.n))
        probe.close()
        numel = sum(p.numel() for p in self.policy.parameters())
        self.shared = ctx.shared("a3c-params", numel)
        self.table = LoadTable.shared(ctx, agents, trainers)


class A3CAgent(_A3CRole):
    """Simulator + agent: roll out; the experience service dispenses, compresses, migrates."""

    def run(self) -> None:
        torch.distributed.barrier()  # the first trainer has published the initial weights
        device = self.ctx.torch_device
        shard = Shard(self.cfg, self.agents.index(self.gmi_id), device)
        policy = self.policy.to(device)
        service = ExperienceService(Migrator(self.ctx, self.table), self.rows)
        start, started = time.perf_counter(), time.time()
        while time.perf_counter() - start < self.seconds:
            tick = time.perf_counter()
            torch.nn.utils.vector_to_parameters(self.shared.to(device, copy=True), policy.parameters())
            experience = shard.collect(policy)
            service.submit({name: tensor.cpu() for name, tensor in experience.items()})
            self.ctx.report(kind="progress", started=started,
                            steps=self.cfg.num_envs * self.cfg.num_steps,
                            seconds=time.perf_counter() - tick, returns=shard.take_returns())
        service.close()
        self.ctx.report(kind="done", max_rss_mb=peak_memory_mb())


class A3CTrainer(_A3CRole):
    """Trainer: update the shared weights from each batch that arrives."""

    def run(self) -> None:
        _share_parameters(self.policy, self.shared, publish=self.gmi_id == self.trainers[0])
        torch.distributed.barrier()
        optimizer = make_optimizer(self.policy, self.cfg)
        column = self.trainers.index(self.gmi_id)
        active, updates = len(self.agents), 0
        while active:
            sender, batch = receive(self.ctx, self.obs_shape)
            if not batch:
                active -= 1
                continue
            optimizer.zero_grad()
            a3c_loss(self.policy, batch, self.cfg).backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
            optimizer.step()
            updates += 1
            self.table.done[column, self.agents.index(sender)] += 1
            self.ctx.report(kind="trained", samples=batch["actions"].numel())
            if self._checkpoint_due(updates):
                checkpoint.save(self.ctx.spec.run_dir, updates, self.policy, optimizer)
        if self.gmi_id == self.trainers[0]:
            checkpoint.save(self.ctx.spec.run_dir, updates, self.policy, optimizer)
        self.ctx.report(kind="done", max_rss_mb=peak_memory_mb())

    def _checkpoint_due(self, updates: int) -> bool:
        return (self.gmi_id == self.trainers[0] and self.checkpoint_every > 0
                and updates % self.checkpoint_every == 0)


def _share_parameters(policy: ActorCritic, shared: torch.Tensor, publish: bool) -> None:
    """Make ``policy``'s parameters views of ``shared``; the publisher writes its weights first."""
    offset = 0
    for param in policy.parameters():
        view = shared[offset:offset + param.numel()].view_as(param)
        if publish:
            view.copy_(param.detach())
        param.data = view
        offset += param.numel()


def a3c_loss(policy: ActorCritic, batch: dict[str, torch.Tensor], cfg: PPOConfig) -> torch.Tensor:
    """Advantage actor-critic loss with the trainer's current critic as baseline."""
    dist, value = policy(batch["obs"])
    advantage = (batch["returns"] - value).detach()
    policy_loss = -(dist.log_prob(batch["actions"]) * advantage).mean()
    value_loss = 0.5 * ((batch["returns"] - value) ** 2).mean()
    return policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * dist.entropy().mean()
