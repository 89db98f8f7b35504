"""Checkpoints: the policy and optimizer state, written atomically."""
from __future__ import annotations

import os

import torch

from tempo.gmi.atomic import write_atomic

CHECKPOINT = "checkpoint.pt"


def save(run_dir: str, iteration: int, policy: torch.nn.Module, optimizer) -> str:
    """Write ``run_dir/checkpoint.pt``; a reader never sees a half-written file."""
    path = os.path.join(run_dir, CHECKPOINT)
    state = {"iteration": iteration, "policy": policy.state_dict(),
             "optimizer": optimizer.state_dict()}
    write_atomic(path, lambda handle: torch.save(state, handle), mode="wb")
    return path


def load(run_dir: str) -> dict:
    """The last checkpoint of a run, in host memory."""
    return torch.load(os.path.join(run_dir, CHECKPOINT), map_location="cpu", weights_only=True)
