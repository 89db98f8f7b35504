"""The ``bench-reduce`` routine: reduce random gradients with each strategy, time it, check it.

Like nccl-tests' ``all_reduce_perf``: every instance draws its own random
gradient, each strategy sums them; instance 0 compares the result with a
float64 single-process sum of the same gradients, and every instance checks
that it holds the same result as instance 0.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tempo.gmi.comm import GMIContext
from tempo.gmi.reduce import make_reducer
from tempo.gmi.roles import Role


def gradient(seed: int, gmi_id: int, numel: int, dtype=torch.float32) -> torch.Tensor:
    """The random gradient instance ``gmi_id`` contributes."""
    generator = torch.Generator().manual_seed(seed * 100_003 + gmi_id)
    return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)


def reference_sum(seed: int, ranks, numel: int) -> torch.Tensor:
    """The float64 sum of every instance's gradient, in one process."""
    total = torch.zeros(numel, dtype=torch.float64)
    for gmi_id in ranks:
        total += gradient(seed, gmi_id, numel, torch.float64)
    return total


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """max |result - reference| / max |reference| (infinity-norm relative error)."""
    scale = reference.abs().max().item() or 1.0
    return (result.double() - reference).abs().max().item() / scale


class ReduceBench(Role):
    """Times and checks each strategy over all instances of the layout."""

    def __init__(self, ctx: GMIContext, strategies: list[str], numel: int, repeats: int, seed: int):
        super().__init__(ctx)
        self.strategies, self.numel, self.repeats, self.seed = strategies, numel, repeats, seed
        self.mpl = ctx.spec.reduce_mpl
        self.ranks = [r for ids in self.mpl for r in ids]

    def run(self) -> None:
        grad = gradient(self.seed, self.gmi_id, self.numel).to(self.ctx.torch_device)
        reference = reference_sum(self.seed, self.ranks, self.numel) if self.gmi_id == 0 else None
        for name in self.strategies:
            reduce = make_reducer(name, self.ctx, self.mpl, self.numel, tag=f"bench-{name}")
            result = reduce(grad.clone()).cpu()
            error = self._error(result, reference)
            seconds = self._time(reduce, grad)
            if self.gmi_id == 0:
                self.ctx.report(kind="reduce", strategy=name, numel=self.numel,
                                seconds=seconds, max_rel_error=error)

    def _error(self, result: torch.Tensor, reference: torch.Tensor | None) -> float:
        """Instance 0's error against the float64 sum, or any instance's disagreement with it."""
        leader = result.clone()
        dist.broadcast(leader, 0)
        disagreement = torch.tensor([(result - leader).abs().max().item()], dtype=torch.float64)
        dist.all_reduce(disagreement, op=dist.ReduceOp.MAX)
        if reference is None:
            return float("nan")
        scale = reference.abs().max().item() or 1.0
        return max(relative_error(result, reference), disagreement.item() / scale)

    def _time(self, reduce, grad: torch.Tensor) -> float:
        """Mean seconds per reduction, the slowest instance's."""
        buffer = torch.empty_like(grad)
        elapsed = 0.0
        for _ in range(self.repeats):
            buffer.copy_(grad)
            dist.barrier()
            start = time.perf_counter()
            reduce(buffer)
            if buffer.is_cuda:
                torch.cuda.synchronize(buffer.device)
            elapsed += time.perf_counter() - start
        slowest = torch.tensor([elapsed / self.repeats], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return slowest.item()
