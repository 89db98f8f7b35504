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

State kept outside the program (a gymnasium vector env's environments)
goes into the same file through ``hosts``: objects with
``save_when(when)``, told where checkpoints are written before the run,
and ``saved_state(point) -> {name: array}``, asked at each write (``point``
local to this run). ``tempo.rl`` environments that keep such state have
both; see docs/rl.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

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


@runtime_checkable
class HostState(Protocol):
    """State a program keeps outside its tensors that checkpoints also save (``tpo.checkpoint(hosts=...)``)."""

    def save_when(self, when: Expr | None) -> None:
        """Be ready to give the state at the points where ``when`` holds (None: every point)."""

    def saved_state(self, point: dict[str, int]) -> dict[str, np.ndarray]:
        """The state at ``point`` (this run's own step counts), as named arrays."""


def write_atomic(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """Write a safetensors file so that ``path`` is either the old file or the complete new one."""
    from safetensors.numpy import save as to_bytes  # imported where a program checkpoints, not with tempo

    arrays = {k: np.asarray(v) for k, v in tensors.items()}
    write_bytes_atomic(path, to_bytes({k: v if v.flags.c_contiguous else v.copy() for k, v in arrays.items()},
                                      metadata=dict(metadata)))


def _check_writable(path: str, site) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise TempoError(f"cannot write checkpoint {path!r}: directory {directory!r} does not exist", site)
    if not os.access(directory, os.W_OK):
        raise TempoError(f"cannot write checkpoint {path!r}: directory {directory!r} is not writable", site)


def checkpoint(state: Mapping[str, RT], path: str, when: Expr | None = None,
               hosts: Sequence[HostState] = ()) -> RT:
    """Write ``state`` (name -> RT) to ``path`` at every point where ``when`` holds (default: every point).

    ``hosts``: objects whose state lives outside the program (see :class:`HostState`),
    written into the same file at the same points.
    """
    site = user_site()
    _check_writable(path, site)
    for host in hosts:
        save_when = getattr(host, "save_when", None)
        if save_when is None:
            raise TempoError(f"{host!r} keeps no state outside the program to checkpoint "
                             f"(hosts takes objects with save_when and saved_state)", site)
        save_when(when)
    values = {name: (rt[when] if when is not None else rt) for name, rt in state.items()}
    start = next((rt.ctx.start for rt in state.values()), {})
    return sink_many(values, _writer(path, start, tuple(hosts)), label="checkpoint")


def rt_checkpoint(self: RT, path: str, name: str = "value") -> RT:
    """``rt.checkpoint(path)``: write this RT at every point where it is defined (index it by a condition)."""
    site = user_site()
    _check_writable(path, site)
    return sink_many({name: self}, _writer(path, self.ctx.start), label="checkpoint")


def _writer(path: str, start: Mapping[str, int], hosts: tuple = ()):
    """The sink that writes one checkpoint at a point of this run, named by its global point."""
    def write(tensors: dict, point: dict) -> None:
        tensors = {**tensors, **{k: v for host in hosts for k, v in host.saved_state(dict(point)).items()}}
        point = {k: v + start.get(k, 0) for k, v in point.items()}
        write_atomic(path.format(**point), tensors, {f"point.{k}": str(v) for k, v in point.items()})

    return write


def load_checkpoint(path: str) -> Checkpoint:
    """The tensors of a checkpoint written by :func:`checkpoint`, with the point it was written at."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    if not os.path.exists(path):
        raise TempoError(f"no checkpoint at {path!r}", user_site())
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    point = {k.split(".", 1)[1]: int(v) for k, v in metadata.items() if k.startswith("point.")}
    return Checkpoint(load_file(path), point)


RT.checkpoint = rt_checkpoint
