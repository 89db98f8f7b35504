"""The communication side of an instance: torch.distributed groups, p2p, host shared memory.

One :class:`GMIContext` per instance process. Every instance joins one gloo
world (rank = GMI id; control messages and experience travel there as host
tensors); then, all together and in one order, they create the sub-groups the
reduction strategies use over the trainer instances (all trainers, each
device's trainers, the leaders, the rings), each with the backend
:func:`~tempo.gmi.strategy.group_backend` picks. A collective stages its tensor
to the group's memory (GPU for NCCL, host for gloo) and back.
"""
from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from tempo.gmi.errors import GMIError
from tempo.gmi.instance import InstanceSpec
from tempo.gmi.shm import shm_path
from tempo.gmi.resources import ResourceShare
from tempo.gmi.strategy import group_backend, strategy_groups


def torch_device(share: ResourceShare) -> torch.device:
    """Where an instance with ``share`` computes; a GPU share needs a CUDA build of torch."""
    if share.backend == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise GMIError(f"instance {share.gmi_id} has a GPU share ({share.describe()}) but torch "
                       f"{torch.__version__} sees no CUDA device (CUDA build: "
                       f"{torch.version.cuda or 'none'}); use --backend cpu")
    return torch.device("cuda", 0)  # the share's CUDA_VISIBLE_DEVICES leaves one GPU or MIG slice


class GMIContext:
    """Rank, layout, groups and messaging of the current instance."""

    def __init__(self, spec: InstanceSpec, reports):
        self.spec = spec
        self.gmi_id = spec.gmi_id
        self.layout = spec.layout
        self._reports = reports
        self.torch_device = torch_device(spec.share)
        if self.torch_device.type == "cuda":
            torch.cuda.set_device(self.torch_device)
        self._groups: dict[tuple[int, ...], tuple[object, torch.device]] = {}
        dist.init_process_group("gloo", init_method=spec.init_method, rank=spec.gmi_id,
                                world_size=spec.layout.world_size,
                                timeout=timedelta(seconds=spec.timeout_s))
        for ranks in strategy_groups(spec.reduce_mpl) if spec.reduce_mpl else ():
            backend = group_backend(ranks, spec.reduce_mpl, spec.share.backend)
            group = dist.new_group(list(ranks), backend=backend)
            if spec.gmi_id in ranks:
                home = self.torch_device if backend == "nccl" else torch.device("cpu")
                self._groups[ranks] = (group, home)

    @property
    def device(self) -> int:
        return self.spec.share.device

    def group(self, ranks) -> tuple[object, torch.device]:
        """The process group of ``ranks`` (one of those made at start-up) and its memory."""
        key = tuple(ranks)
        if key not in self._groups:
            raise GMIError(f"instance {self.gmi_id} has no process group for instances {list(key)}")
        return self._groups[key]

    def allreduce(self, tensor: torch.Tensor, ranks) -> torch.Tensor:
        """Sum ``tensor`` in place over ``ranks``."""
        if len(ranks) > 1:
            self._collective(dist.all_reduce, tensor, ranks)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int, ranks) -> torch.Tensor:
        """Overwrite ``tensor`` in place with instance ``src``'s, over ``ranks``."""
        if len(ranks) > 1:
            self._collective(dist.broadcast, tensor, ranks, src=src)
        return tensor

    def _collective(self, collective, tensor: torch.Tensor, ranks, **kwargs) -> None:
        """Run ``collective`` on the group's memory, staging ``tensor`` there and back."""
        group, home = self.group(ranks)
        staged = tensor if tensor.device == home else tensor.to(home)
        collective(staged, group=group, **kwargs)
        if staged is not tensor:
            tensor.copy_(staged)

    def barrier(self, ranks) -> None:
        if len(ranks) > 1:
            dist.barrier(group=self.group(ranks)[0])

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

