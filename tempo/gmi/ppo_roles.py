"""The holistic training instance (TCG_EX): simulator, agent and trainer in one process.

Each instance steps its own environments (simulator), picks actions with its
copy of the policy (agent) and trains it (trainer); gradients are summed over
all instances with the layout's reduction strategy, so every copy stays the same.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tempo.gmi import checkpoint
from tempo.gmi.comm import GMIContext
from tempo.gmi.ppo import PPOConfig, Shard, make_optimizer, make_policy, update
from tempo.gmi.reduce import Reducer
from tempo.gmi.roles import Role, peak_memory_mb


class HolisticPPO(Role):
    """Data-parallel PPO over every instance of the layout."""

    def __init__(self, ctx: GMIContext, config: dict, strategy: str, seconds: float = 0.0,
                 iterations: int = 0, checkpoint_every: int = 0):
        super().__init__(ctx)
        self.cfg = PPOConfig(**config)
        self.strategy, self.seconds, self.iterations = strategy, seconds, iterations
        self.checkpoint_every = checkpoint_every
        self.mpl = ctx.spec.reduce_mpl
        self.world = sum(len(ids) for ids in self.mpl)

    def run(self) -> None:
        shard = Shard(self.cfg, self.gmi_id, self.ctx.torch_device)
        policy = make_policy(self.cfg, shard.obs_dim, shard.num_actions).to(self.ctx.torch_device)
        optimizer = make_optimizer(policy, self.cfg)
        reduce_ = Reducer(self.strategy, self.ctx, self.mpl)
        start, iteration, started = time.perf_counter(), 0, time.time()
        while not self._done(iteration, start):
            tick, reducing = time.perf_counter(), reduce_.seconds
            batch = shard.collect(policy)
            update(policy, optimizer, [batch], [shard.generator], self.cfg, reduce_, self.world)
            iteration += 1
            self.ctx.report(kind="progress", iteration=iteration, started=started,
                            steps=self.cfg.num_envs * self.cfg.num_steps,
                            seconds=time.perf_counter() - tick, returns=shard.take_returns(),
                            comm_seconds=reduce_.seconds - reducing)
            if self.gmi_id == 0 and self.checkpoint_every and iteration % self.checkpoint_every == 0:
                checkpoint.save(self.ctx.spec.run_dir, iteration, policy, optimizer)
        if self.gmi_id == 0:
            checkpoint.save(self.ctx.spec.run_dir, iteration, policy, optimizer)
        self.ctx.report(kind="done", max_rss_mb=peak_memory_mb())

    def _done(self, iteration: int, start: float) -> bool:
        """Every instance stops after the same iteration: the slowest clock decides."""
        if self.iterations:
            return iteration >= self.iterations
        late = torch.tensor([float(time.perf_counter() - start >= self.seconds)])
        dist.all_reduce(late, op=dist.ReduceOp.MAX)  # every instance is a trainer in TCG_EX
        return bool(late.item())

