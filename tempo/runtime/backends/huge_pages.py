"""Buffers of a few megabytes on the kernel's huge pages (2 MB), carved from shared slabs.

On Linux with transparent huge pages in ``madvise`` mode (the common default)
a process gets 2 MB pages only where it asks for them; NumPy asks for arrays
of 4 MB or more. A decoding step's keys and values are one buffer per layer
of ``capacity x row`` floats: 786 KB at batch 1 and 1,024 positions, 3.1 MB at
batch 4, so on 4 KB pages, where each 4 KB of a stream is another address
translation and the hardware prefetcher's streams stop at each page's end.
Read from those buffers, attention ran at 15 GB/s against 22 on huge pages
(one thread, batch 4, 1,024 positions: ``benchmarks/decode_attention_rate.py
--huge-pages``; docs/llm.md, "The page size of the keys and values").

:class:`Slabs` hands out such buffers from slabs of :data:`SLAB_BYTES` mapped
anonymously, 2 MB-aligned, and marked ``MADV_HUGEPAGE``: each buffer is a
view of its slab (so a slab is unmapped when the last of its buffers is
freed), placed one after the other (no reuse within a slab). Each buffer is
reported to ``tracemalloc`` in NumPy's domain while it lives, as NumPy reports
its own arrays. Where the platform has no ``MADV_HUGEPAGE`` the buffers are
plain ``np.empty`` arrays.
"""
from __future__ import annotations

import ctypes
import mmap
import weakref

import numpy as np

HUGE_PAGE = 2 << 20
SLAB_BYTES = 32 << 20  # a slab's usable bytes: 16 huge pages
SMALLEST = 256 << 10  # buffers below it stay with NumPy's allocator (their pages are few)
LARGEST = 4 << 20  # from this size on NumPy asks for huge pages itself
ALIGN = 64  # each buffer starts on a cache line
NUMPY_TRACE_DOMAIN = 389047  # the tracemalloc domain NumPy reports its arrays' data in

_track = ctypes.pythonapi.PyTraceMalloc_Track
_track.argtypes, _track.restype = [ctypes.c_uint, ctypes.c_size_t, ctypes.c_size_t], ctypes.c_int
_untrack = ctypes.pythonapi.PyTraceMalloc_Untrack
_untrack.argtypes, _untrack.restype = [ctypes.c_uint, ctypes.c_size_t], ctypes.c_int


def available() -> bool:
    """Whether this platform can mark memory for huge pages (``mmap.MADV_HUGEPAGE``)."""
    return hasattr(mmap, "MADV_HUGEPAGE")


class Slabs:
    """Buffers of :data:`SMALLEST` to :data:`LARGEST` bytes carved from huge-page slabs (see the
    module docstring); other sizes, or no ``MADV_HUGEPAGE``, from ``np.empty``."""

    def __init__(self):
        self._slab: np.ndarray | None = None  # the slab being filled (uint8, 2 MB-aligned)
        self._used = 0

    def empty(self, shape: tuple, dtype) -> np.ndarray:
        """An uninitialised C-ordered array of ``shape`` and ``dtype``, as ``np.empty`` gives."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not SMALLEST <= nbytes < LARGEST or not available():
            return np.empty(shape, dtype)
        start = -(-self._used // ALIGN) * ALIGN
        if self._slab is None or start + nbytes > SLAB_BYTES:
            self._slab, start = _new_slab(), 0
        self._used = start + nbytes
        out = self._slab[start:start + nbytes].view(dtype).reshape(shape)
        address = out.ctypes.data
        _track(NUMPY_TRACE_DOMAIN, address, nbytes)
        weakref.finalize(out, _untrack, NUMPY_TRACE_DOMAIN, address)
        return out


def _new_slab() -> np.ndarray:
    """:data:`SLAB_BYTES` of anonymous memory starting at a 2 MB boundary, marked for huge pages."""
    mapped = mmap.mmap(-1, SLAB_BYTES + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mapped, np.uint8)
    offset = -whole.ctypes.data % HUGE_PAGE
    try:
        mapped.madvise(mmap.MADV_HUGEPAGE, offset, SLAB_BYTES)
    except OSError:  # a kernel without transparent huge pages: the slab still holds the buffers
        pass
    return whole[offset:offset + SLAB_BYTES]
