"""The small interface every backend implements, and the backend registry."""
from __future__ import annotations

import contextlib
import functools
import os
from importlib.metadata import EntryPoint, entry_points
from typing import Callable

from tempo.config import ENV
from tempo.errors import TempoError
from tempo.ir.ops import Op

Kernel = Callable[[list, dict, tuple], tuple]  # (inputs, env, point) -> outputs


def along(op, x, index):
    """A batched ``TakeOp``'s indices ``(*batch, S)`` shaped for ``take_along_axis`` on ``x``: size 1 on
    every axis of ``x`` but the batch axes and the taken one."""
    axis, batch = op.axis % x.ndim, op.batch
    return index.reshape(tuple(index.shape[:batch]) + (1,) * (axis - batch) + (index.shape[-1],)
                         + (1,) * (x.ndim - axis - 1))


class StepFailed(Exception):
    """A step of a fused island failed; carries the step's op name and user site."""

    def __init__(self, op_name: str, site, error: Exception):
        super().__init__(str(error))
        self.op_name, self.site, self.error = op_name, site, error


class Backend:
    """Translate ops to kernels and handle the backend's tensors."""

    name = "base"
    donates = False  # whether kernel() takes donate= (inputs it may write its outputs into)
    copies_constants = False  # whether a kernel holds a copy of a constant's array (so is made again each run)
    orders_every_program = False  # step_order marks every program (True) or one with a dim that ends at run time

    def kernel(self, op: Op) -> Kernel:
        """A function ``(inputs, env, point) -> tuple of outputs`` computing ``op``."""
        raise NotImplementedError

    def covers(self, op_type: type) -> bool:
        """Whether :meth:`kernel` handles ops of ``op_type`` (merges are the executor's own)."""
        raise NotImplementedError

    @property
    def device_kind(self) -> str:
        """``"gpu"`` when the backend computes on a GPU, else ``"cpu"`` (the cost tables a device
        budget steers passes by: :mod:`tempo.transforms.cache_activations`)."""
        device = getattr(self, "device", None)
        kind = getattr(device, "platform", None) or getattr(device, "type", None) or ""
        return "gpu" if str(kind).lower() in ("gpu", "cuda") else "cpu"

    def device_loop(self, plan, sdg):
        """A planned loop (:mod:`tempo.runtime.device_loops`) compiled as one device program, or None:
        the backend runs loops statement by statement."""
        return None

    @property
    def compiles_loops(self) -> bool:
        """Whether :meth:`device_loop` compiles loops (the compiler then gives reads that grow with a
        loop's counter static shapes: :mod:`tempo.transforms.masked_reads`)."""
        return type(self).device_loop is not Backend.device_loop

    @property
    def skips_masked_rows(self) -> bool:
        """Whether a product reading a K/V buffer masked to the rows written so far reads only those
        rows (:attr:`tempo.transforms.masked_reads.Config.mask_products`)."""
        return False

    def weight_panel(self, rows: int) -> int | None:
        """The columns per panel a constant right operand of a product of ``rows`` rows is
        stored in (:mod:`tempo.transforms.pack_weights`), or None: as it is."""
        return None

    def running(self):
        """A context manager the executor runs a program under (JAX: 64-bit types on)."""
        return contextlib.nullcontext()

    def stack(self, tensors: list, shape: tuple, dtype: str):
        """Stack ``tensors`` along new leading axes of sizes ``shape``."""
        raise NotImplementedError

    def cast(self, tensor, dtype: str):
        """``tensor`` (the backend's, or a NumPy array) as the backend's tensor of ``dtype``."""
        raise NotImplementedError

    def broadcast(self, tensor, shape: tuple):
        """``tensor`` broadcast to ``shape`` (new leading axes, read-only is fine)."""
        raise NotImplementedError

    def to_numpy(self, tensor):
        raise NotImplementedError

    # ----- kernel wrappers (TEMPO Fig. 16): pre-allocated buffers, in-place writes, lazy reads -----
    def empty(self, shape: tuple, dtype: str):
        """An uninitialised buffer of ``shape`` and ``dtype`` (a block or window store's rows)."""
        raise NotImplementedError

    def empty_rows(self, rows: int, row_shape: tuple, dtype: str, axis: int = 0):
        """An uninitialised buffer of ``rows`` rows of ``row_shape`` (of shape ``(rows,) + row_shape``)
        whose rows lie in memory at ``axis`` among a row's axes (0: row after row): a layout
        hint, which a backend may ignore."""
        return self.empty((rows,) + tuple(row_shape), dtype)

    def write_into(self, buffer, index, value):
        """``buffer`` with ``value`` (cast to the buffer's dtype) written at ``buffer[index]``.

        The in-place-writes wrapper: NumPy and torch write into ``buffer`` and
        return it; JAX, whose arrays are immutable, donates ``buffer`` to the
        update and returns the result (the old ``buffer`` is then invalid).
        """
        raise NotImplementedError

    def view(self, buffer, index):
        """``buffer[index]`` (ints and step-1 slices) without copying where the backend can:
        the lazy-reads wrapper. Never ``buffer`` itself."""
        raise NotImplementedError

    def detach(self, tensor, sources: list):
        """``tensor``, copied if it may share memory with any of ``sources`` (views of a
        buffer whose rows are later overwritten)."""
        raise NotImplementedError

    def nbytes(self, tensor) -> int:
        """Bytes of ``tensor``'s elements."""
        raise NotImplementedError

    def owned_nbytes(self, tensor) -> int:
        """Bytes ``tensor`` holds of its own: 0 for a view of another tensor's memory (memory accounting)."""
        return self.nbytes(tensor)


GROUP = "tempo.backends"  # the entry-point group a backend registers itself in
DEFAULT_ENV = ENV["backend"]
REFERENCE = "numpy"
BUILT_IN = {"numpy": "tempo.runtime.backends.numpy:NumPyBackend", "torch": "tempo.runtime.backends.torch:TorchBackend",
            "jax": "tempo.runtime.backends.jax:JaxBackend"}
"""Tempo's own backends, declared also where Tempo runs from its source tree without being installed
(no package metadata to read entry points from): an installed package's entry point of the same name wins."""


@functools.cache
def _declared() -> dict[str, EntryPoint]:
    """The backends installed packages declare, by name: the reference backend first, then by name.

    A backend registers itself with an entry point in the ``tempo.backends`` group of its
    package's metadata (``numpy = "tempo.runtime.backends.numpy:NumPyBackend"``): the name
    users pass, and the :class:`Backend` subclass, built as ``cls(device)``; :data:`BUILT_IN` are declared
    without it."""
    points = {name: EntryPoint(name, value, GROUP) for name, value in BUILT_IN.items()}
    points.update((ep.name, ep) for ep in entry_points(group=GROUP))
    return {name: points[name] for name in sorted(points, key=lambda n: (n != REFERENCE, n))}


@functools.cache
def _load(name: str) -> type[Backend] | ModuleNotFoundError:
    """The backend class ``name`` declares, or the error saying which package it needs."""
    try:
        return _declared()[name].load()
    except ModuleNotFoundError as missing:
        if missing.name is None or missing.name.split(".")[0] == "tempo":
            raise
        return missing


def available_backends() -> list[str]:
    """The declared backends whose packages are installed: numpy first, then by name."""
    return [name for name in _declared() if not isinstance(_load(name), ModuleNotFoundError)]


def default_backend() -> str:
    """The backend a run uses when neither it nor its :class:`tempo.config.Config` names one:
    ``$TEMPO_BACKEND``, else ``numpy``."""
    return os.environ.get(DEFAULT_ENV) or REFERENCE


def get_backend(name: str | None = None, site=None) -> Backend:
    """The backend ``name`` (``numpy``, ``torch``, ``jax`` or any other a package declares;
    None: :func:`default_backend`).

    ``name`` may name a device after a colon: ``torch:cuda``, ``jax:gpu``
    (default: the CPU for torch, JAX's default device for JAX). A backend
    whose package is missing, or a device that is not present, is a
    TempoError saying what to install or choose.
    """
    name = name or default_backend()
    base, _, device = str(name).partition(":")
    if base not in _declared():
        raise TempoError(f"unknown backend {name!r}; available: {', '.join(available_backends())} "
                         f"(known: {', '.join(_declared())})", site)
    cls = _load(base)
    if isinstance(cls, ModuleNotFoundError):
        raise TempoError(f"the {base} backend needs the {cls.name!r} package, which is not installed: "
                         f"pip install 'tempo-dl[backends]', or choose one of the available backends: "
                         f"{', '.join(available_backends())}", site)
    try:
        return cls(device or None)
    except TempoError as err:
        raise TempoError(str(err), site) from None
