"""The small interface every backend implements, and the backend registry."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
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


_BACKENDS: dict[str, Callable[..., Backend]] = {}
MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax"}  # backend name -> the package it needs
DEFAULT_ENV = ENV["backend"]


def register(name: str):
    def wrap(factory):
        _BACKENDS[name] = factory
        return factory

    return wrap


def available_backends() -> list[str]:
    """The backends whose package is installed, in order: numpy, torch, jax."""
    return [name for name, package in MODULES.items() if importlib.util.find_spec(package) is not None]


def default_backend() -> str:
    """The backend a run uses when neither it nor its :class:`tempo.config.Config` names one:
    ``$TEMPO_BACKEND``, else ``numpy``."""
    return os.environ.get(DEFAULT_ENV) or "numpy"


def get_backend(name: str | None = None, site=None) -> Backend:
    """The backend ``name`` (``numpy``, ``torch`` or ``jax``; None: :func:`default_backend`).

    ``name`` may name a device after a colon: ``torch:cuda``, ``jax:gpu``
    (default: the CPU for torch, JAX's default device for JAX). A backend
    whose package is missing, or a device that is not present, is a
    TempoError saying what to install or choose.
    """
    name = name or default_backend()
    base, _, device = str(name).partition(":")
    if base not in MODULES:
        raise TempoError(f"unknown backend {name!r}; available: {', '.join(available_backends())} "
                         f"(known: {', '.join(MODULES)})", site)
    if importlib.util.find_spec(MODULES[base]) is None:
        raise TempoError(f"the {base} backend needs the {MODULES[base]!r} package, which is not installed: "
                         f"pip install 'tempo-dl[backends]', or choose one of the available backends: "
                         f"{', '.join(available_backends())}", site)
    importlib.import_module(f"tempo.runtime.backends.{base}")
    if base == "numpy" and device not in ("", "cpu"):
        raise TempoError(f"the numpy backend runs on the CPU only, not on {device!r}: "
                         f"choose torch:cuda or jax:gpu for a GPU", site)
    try:
        return _BACKENDS[base](device or None) if base != "numpy" else _BACKENDS[base]()
    except TempoError as err:
        raise TempoError(str(err), site) from None
