"""Layout-aware gradient reduction (section 4.1): MPR, MRR and HAR over torch.distributed.

Each strategy sums a flat float32 tensor in place over the instances of a
mapping list ``mpl`` (global instance ids per device); every instance ends
with the same bits. A strategy is built once per (layout, size) and reused.
"""
from __future__ import annotations

import time

import torch

from tempo.gmi.comm import GMIContext
from tempo.gmi.strategy import check_strategy


class HostStage:
    """Sum over ``ranks`` through host shared memory: each instance writes its row,
    then sums one slice of the columns into ``out``; two barriers.

    Rows are summed in instance order, so the result is deterministic.
    """

    def __init__(self, ctx: GMIContext, ranks: tuple[int, ...], numel: int, name: str):
        self.ctx, self.ranks = ctx, ranks
        self.row = ranks.index(ctx.gmi_id)
        n = len(ranks)
        self.inbox = ctx.shared(f"{name}-in", n * numel).view(n, numel)
        self.out = ctx.shared(f"{name}-out", numel)
        chunk = -(-numel // n)
        self.cols = slice(self.row * chunk, min(numel, (self.row + 1) * chunk))

    def sum(self, flat: torch.Tensor) -> torch.Tensor:
        """Leave the sum of every instance's ``flat`` in ``self.out``."""
        self.inbox[self.row].copy_(flat)
        self.ctx.barrier(self.ranks)
        torch.sum(self.inbox[:, self.cols], dim=0, out=self.out[self.cols])
        self.ctx.barrier(self.ranks)
        return self.out


class MultiProcessReduction:
    """MPR: one :class:`HostStage` over every instance, whatever device it is on."""

    def __init__(self, ctx: GMIContext, mpl, numel: int, tag: str):
        self.stage = HostStage(ctx, tuple(r for ids in mpl for r in ids), numel, f"{tag}-mpr")

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.copy_(self.stage.sum(flat))


class MultiRingReduction:
    """MRR: all-reduce in each ring (the i-th instance of every device), then
    all-reduce the ring sums among one instance per ring (ring r's on device r),
    then broadcast inside each ring."""

    def __init__(self, ctx: GMIContext, mpl, numel: int, tag: str):
        self.ctx = ctx
        local = [ids.index(ctx.gmi_id) for ids in mpl if ctx.gmi_id in ids][0]
        self.ring = tuple(ids[local] for ids in mpl)
        self.representatives = tuple(mpl[r][r] for r in range(len(mpl[0])))
        self.representative = mpl[local][local]

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        self.ctx.allreduce(flat, self.ring)
        if len(self.representatives) > 1:
            if self.ctx.gmi_id in self.representatives:
                self.ctx.allreduce(flat, self.representatives)
            if len(self.ring) > 1:
                self.ctx.broadcast(flat, self.representative, self.ring)
        return flat


class HierarchicalReduction:
    """HAR: sum each device's instances in host shared memory (a :class:`HostStage`),
    all-reduce the device sums among the leaders (each device's first instance),
    then each leader publishes the total to its device through the same memory."""

    def __init__(self, ctx: GMIContext, mpl, numel: int, tag: str):
        self.ctx = ctx
        index = [d for d, ids in enumerate(mpl) if ctx.gmi_id in ids][0]
        self.device = tuple(mpl[index])
        self.leader = self.device[0]
        self.leaders = tuple(ids[0] for ids in mpl)
        self.stage = (HostStage(ctx, self.device, numel, f"{tag}-har{index}")
                      if len(self.device) > 1 else None)

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        if self.stage is None:
            return self.ctx.allreduce(flat, self.leaders)
        total = self.stage.sum(flat)
        if self.ctx.gmi_id == self.leader:
            self.ctx.allreduce(flat.copy_(total), self.leaders)
            total.copy_(flat)
        self.ctx.barrier(self.device)
        return flat.copy_(total)


# strategy name -> class; each is built as cls(ctx, mpl, numel, tag) and called on a flat tensor
STRATEGIES = {"mpr": MultiProcessReduction, "mrr": MultiRingReduction,
              "har": HierarchicalReduction}


def make_reducer(name: str, ctx: GMIContext, mpl, numel: int, tag: str = "grad"):
    """A callable that sums a flat float32 tensor of ``numel`` in place over ``mpl``."""
    check_strategy(name, mpl)
    return STRATEGIES[name](ctx, mpl, numel, tag)


class Reducer:
    """Sums flat float32 tensors of any size over ``mpl`` with one strategy.

    A strategy instance is built per tensor size on first use; every instance
    reduces the same sizes in the same order, so they build them together.
    """

    def __init__(self, name: str, ctx: GMIContext, mpl, tag: str = "grad"):
        check_strategy(name, mpl)
        self.name, self.ctx, self.mpl, self.tag = name, ctx, mpl, tag
        self._by_size: dict[int, object] = {}
        self.seconds = 0.0  # time spent reducing, for reports

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        numel = flat.numel()
        if numel not in self._by_size:
            self._by_size[numel] = make_reducer(self.name, self.ctx, self.mpl, numel,
                                                f"{self.tag}-{numel}")
        start = time.perf_counter()
        self._by_size[numel](flat)
        if flat.is_cuda:
            torch.cuda.synchronize(flat.device)
        self.seconds += time.perf_counter() - start
        return flat
