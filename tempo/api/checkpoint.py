"""Checkpoints: atomic safetensors writes from inside a program, and loading them back.

``tpo.checkpoint(state, path, when=cond)`` adds a sink that writes the named
tensors at every point where ``cond`` holds: to a temporary file in the same
directory, fsync'ed, then renamed over ``path``, so a crash never leaves a
truncated checkpoint. ``path`` may name dims (``"ckpt-{i}.safetensors"``).
``tpo.load_checkpoint(path)`` returns the tensors and the point they were
written at; ``Optimizer.resume(checkpoint)`` restarts training from them.
Points are global: in a run that continues an earlier one
(``tpo.Context(start={"i": n})``), step ``i`` is written as ``i + n``, in
the file name and in the checkpoint's point, so a resumed run never
overwrites the files of the run it continues.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save as to_bytes

from tempo.api.rt import RecurrentTensor as RT
from tempo.api.sinks import sink_many
from tempo.errors import TempoError, user_site
from tempo.files import write_bytes_atomic
from tempo.symbolic.expr import Expr


@dataclass
class Checkpoint:
    """Tensors by name, and the point (dim name -> step) they were saved at."""

    tensors: dict[str, np.ndarray]
    point: dict[str, int]


def write_atomic(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """Write a safetensors file so that ``path`` is either the old file or the complete new one."""
    arrays = {k: np.asarray(v) for k, v in tensors.items()}
    write_bytes_atomic(path, to_bytes({k: v if v.flags.c_contiguous else v.copy() for k, v in arrays.items()},
                                      metadata=dict(metadata)))


def _check_writable(path: str, site) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise TempoError(f"cannot write checkpoint {path!r}: directory {directory!r} does not exist", site)
    if not os.access(directory, os.W_OK):
        raise TempoError(f"cannot write checkpoint {path!r}: directory {directory!r} is not writable", site)


def checkpoint(state: Mapping[str, RT], path: str, when: Expr | None = None) -> RT:
    """Write ``state`` (name -> RT) to ``path`` at every point where ``when`` holds (default: every point)."""
    site = user_site()
    _check_writable(path, site)
    values = {name: (rt[when] if when is not None else rt) for name, rt in state.items()}
    return sink_many(values, _writer(path, next((rt.ctx.start for rt in state.values()), {})), label="checkpoint")


def rt_checkpoint(self: RT, path: str, name: str = "value") -> RT:
    """``rt.checkpoint(path)``: write this RT at every point where it is defined (index it by a condition)."""
    site = user_site()
    _check_writable(path, site)
    return sink_many({name: self}, _writer(path, self.ctx.start), label="checkpoint")


def _writer(path: str, start: Mapping[str, int]):
    """The sink that writes one checkpoint at a point of this run, named by its global point."""
    def write(tensors: dict, point: dict) -> None:
        point = {k: v + start.get(k, 0) for k, v in point.items()}
        write_atomic(path.format(**point), tensors, {f"point.{k}": str(v) for k, v in point.items()})

    return write


def load_checkpoint(path: str) -> Checkpoint:
    """The tensors of a checkpoint written by :func:`checkpoint`, with the point it was written at."""
    from safetensors import safe_open

    if not os.path.exists(path):
        raise TempoError(f"no checkpoint at {path!r}", user_site())
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    point = {k.split(".", 1)[1]: int(v) for k, v in metadata.items() if k.startswith("point.")}
    return Checkpoint(load_file(path), point)


RT.checkpoint = rt_checkpoint
