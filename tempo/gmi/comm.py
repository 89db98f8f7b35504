"""The communication side of an instance: torch.distributed groups, p2p, host shared memory.

One :class:`GMIContext` per instance process. Every instance joins one gloo
world (rank = GMI id); then, all together and in one order, they create the
sub-groups the reduction strategies use over the trainer instances (all
trainers, each device's trainers, the leaders, the rings).
"""
from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from tempo.gmi.errors import GMIError
from tempo.gmi.instance import InstanceSpec
from tempo.gmi.shm import shm_path
from tempo.gmi.strategy import strategy_groups


class GMIContext:
    """Rank, layout, groups and messaging of the current instance."""

    def __init__(self, spec: InstanceSpec, reports):
        self.spec = spec
        self.gmi_id = spec.gmi_id
        self.layout = spec.layout
        self._reports = reports
        self._groups: dict[tuple[int, ...], object] = {}
        dist.init_process_group("gloo", init_method=spec.init_method, rank=spec.gmi_id,
                                world_size=spec.layout.world_size,
                                timeout=timedelta(seconds=spec.timeout_s))
        for ranks in strategy_groups(spec.reduce_mpl) if spec.reduce_mpl else ():
            group = dist.new_group(list(ranks))
            if spec.gmi_id in ranks:
                self._groups[ranks] = group

    @property
    def device(self) -> int:
        return self.spec.share.device

    def group(self, ranks) -> object:
        """The process group of ``ranks`` (one of those made at start-up)."""
        key = tuple(ranks)
        if key not in self._groups:
            raise GMIError(f"instance {self.gmi_id} has no process group for instances {list(key)}")
        return self._groups[key]

    def allreduce(self, tensor: torch.Tensor, ranks) -> torch.Tensor:
        """Sum ``tensor`` in place over ``ranks``."""
        if len(ranks) > 1:
            dist.all_reduce(tensor, group=self.group(ranks))
        return tensor

    def barrier(self, ranks) -> None:
        if len(ranks) > 1:
            dist.barrier(group=self.group(ranks))

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        dist.send(tensor, dst, tag=tag)

    def recv(self, tensor: torch.Tensor, src: int | None = None, tag: int = 0) -> int:
        """Receive into ``tensor`` from ``src`` (any instance if None); returns the sender."""
        return dist.recv(tensor, src, tag=tag)

    def shared(self, name: str, numel: int, dtype=torch.float32) -> torch.Tensor:
        """A flat tensor in host shared memory, the same memory for every instance of the run."""
        path = shm_path(self.spec.run_id, self.spec.run_dir, name)
        return torch.from_file(path, shared=True, size=numel, dtype=dtype)

    def report(self, **event) -> None:
        """Send an event (progress, results) to the manager."""
        self._reports.put({"gmi": self.gmi_id, "time": time.time(), **event})

    def close(self) -> None:
        dist.destroy_process_group()

