"""The small interface every backend implements, and the backend registry."""
from __future__ import annotations

from typing import Callable

from tempo.errors import TempoError
from tempo.ir.ops import Op

Kernel = Callable[[list, dict, tuple], tuple]  # (inputs, env, point) -> outputs


class StepFailed(Exception):
    """A step of a fused island failed; carries the step's op name and user site."""

    def __init__(self, op_name: str, site, error: Exception):
        super().__init__(str(error))
        self.op_name, self.site, self.error = op_name, site, error


class Backend:
    """Translate ops to kernels and handle the backend's tensors."""

    name = "base"

    def kernel(self, op: Op) -> Kernel:
        """A function ``(inputs, env, point) -> tuple of outputs`` computing ``op``."""
        raise NotImplementedError

    def stack(self, tensors: list, shape: tuple, dtype: str):
        """Stack ``tensors`` along new leading axes of sizes ``shape``."""
        raise NotImplementedError

    def cast(self, tensor, dtype: str):
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

    def write_into(self, buffer, index, value) -> None:
        """Write ``value`` (cast to the buffer's dtype) into ``buffer[index]`` in place.

        The in-place-writes wrapper: a code-generating backend writes a kernel's
        output straight into the buffer (buffer donation) instead of copying it.
        """
        raise NotImplementedError

    def view(self, buffer, index):
        """``buffer[index]`` (ints and step-1 slices) without copying: the lazy-reads wrapper."""
        raise NotImplementedError

    def detach(self, tensor, sources: list):
        """``tensor``, copied if it may share memory with any of ``sources`` (views of a
        buffer whose rows are later overwritten)."""
        raise NotImplementedError

    def nbytes(self, tensor) -> int:
        """Bytes of ``tensor``'s elements."""
        raise NotImplementedError


_BACKENDS: dict[str, Callable[[], Backend]] = {}


def register(name: str):
    def wrap(factory):
        _BACKENDS[name] = factory
        return factory

    return wrap


def get_backend(name: str, site=None) -> Backend:
    from tempo.runtime.backends import numpy  # noqa: F401  (registers itself)

    if name not in _BACKENDS:
        raise TempoError(f"unknown backend {name!r}; available: {', '.join(sorted(_BACKENDS))}", site)
    return _BACKENDS[name]()
