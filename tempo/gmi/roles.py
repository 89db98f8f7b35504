"""The role API of the paper's Listing 1: an instance's routine and its messaging.

A :class:`Role` is what an instance runs. ``run`` is its main routine;
``collective`` reduces a tensor over a group of instances with the layout's
strategy, ``send`` and ``recv`` move tensors between instances. Simulator,
agent and trainer are the three DRL roles; an instance holding all three is
the holistic training instance of the TCG_EX layout.
"""
from __future__ import annotations

import resource

import torch

from tempo.gmi.comm import GMIContext


class Role:
    """Base of every instance routine."""

    def __init__(self, ctx: GMIContext):
        self.ctx = ctx
        self.gmi_id = ctx.gmi_id

    def run(self) -> None:
        """The instance's main routine."""
        raise NotImplementedError

    def collective(self, tensor: torch.Tensor, ranks) -> torch.Tensor:
        """Sum ``tensor`` in place over the instances ``ranks``."""
        return self.ctx.allreduce(tensor, ranks)

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Send ``tensor`` to instance ``dst``."""
        self.ctx.send(tensor, dst, tag)

    def recv(self, tensor: torch.Tensor, src: int | None = None, tag: int = 0) -> int:
        """Receive into ``tensor`` (from ``src`` or anyone); returns the sender's id."""
        return self.ctx.recv(tensor, src, tag)


def peak_memory_mb() -> float:
    """Peak resident memory of this instance process, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
