"""The NumPy backend's float32 products with a few rows on one side, by native kernels.

A decoding step multiplies a few rows (the batch, a head's query group) by
large matrices: the weights, stored as column panels ``(count, k, width)`` by
:mod:`tempo.transforms.pack_weights` and multiplied as ``x[..., None, :, :] @
panels``, and attention's keys and values, one ``(S, head_dim)`` matrix per
key/value head (``keys @ q^T`` and ``weights @ values``). ``skinny_products.c``
(built with this machine's C compiler by :mod:`tempo.runtime.native`) reads each
such matrix once, front to back, with software prefetch: the weights at the
rate a plain read of the same bytes runs (``benchmarks/skinny_products.py``),
where NumPy's matrix-vector products reach about 0.9x of it, and a head's
keys or values in one call for every head, where NumPy's matrix product packs
each matrix before using it. :func:`panels` and :func:`stacked` return None
where the kernels do not apply (another dtype or layout, or the source not
built: :func:`unavailable` says why) and the caller multiplies with NumPy. The
sums run in another order than BLAS's: the same products to float32 rounding,
not bit for bit.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from tempo.runtime import native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "skinny_products.c")
_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {"few_rows": [_P, _I, _I, _P, _I, _I, _P, _I, _I, _I, _I, _I, _I],
              "few_columns": [_P, _I, _I, _P, _I, _P, _I, _I, _I, _I, _I]}
MAX_WIDTH = 64      # columns of few_rows' matrices (a multiple of 16)
MAX_PANEL_ROWS = 32  # input rows a weight panel product takes (more are compute-bound: NumPy's matrix product)
FEW = 4             # rows (or columns) of a stacked product's small side
MAX_K = 1024        # few_columns' inner size (a multiple of 16)
STACKED_FROM = 1 << 13  # elements of a stack's large matrices from which its kernels run: below, NumPy's
#                         product is as fast as the kernels' 5-6 us of Python and ctypes (128 keys of 64)
_F32 = np.dtype(np.float32)

KERNELS = native.Kernels(SOURCE, SIGNATURES, "the skinny product kernels are", "their products run with NumPy")
library = KERNELS.library  # the loaded library, built at the first call; None where it cannot be
unavailable = KERNELS.unavailable  # why library() is None


def panels(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` for ``a`` (..., 1, m, k), one matrix of at most 32 rows (every leading axis 1), and
    ``b`` (count, k, width) float32 panels, C-ordered: (..., count, m, width); None where the kernel
    does not apply. The rows and the result share one buffer (two addresses to ask ``ctypes`` for,
    0.8 us each, in a call of about 3 us of Python)."""
    if a.ndim < 3 or b.ndim != 3:
        return None
    (count, k, width), lead, rows = b.shape, a.shape[:-3], a.shape[-2]
    if (a.shape[-1] != k or a.shape[-3] != 1 or a.dtype != _F32 or b.dtype != _F32 or width % 16
            or width > MAX_WIDTH or not 0 < rows <= MAX_PANEL_ROWS or k == 0 or not b.flags.c_contiguous
            or (lead and math.prod(lead) != 1) or library() is None):
        return None
    size = rows * k
    buffer = np.empty(size + count * rows * width, np.float32)
    buffer[:size] = a.reshape(size)
    at = buffer.ctypes.data
    library().few_rows(at, k, 0, b.ctypes.data, width, k * width, at + 4 * size, width, rows * width, count, rows,
                       k, width)
    return buffer[size:].reshape(*lead, count, rows, width)


class RowsByPanels:
    """A linear layer on a batch of rows through weight panels, the result's columns panel after panel:
    ``x`` (rows, k) times ``b`` (count, k, width) as one (rows, count * width) matrix, which is
    ``(x[None] @ b).transpose(1, 0, 2).reshape(rows, count * width)`` written by the kernel in its
    final layout (no permute or reshape after it). One object per product of a program: it keeps
    the address of the last panels it was called with (the same constant at every step: one
    ``ctypes`` address a call instead of two). ``shape``: the result's, (rows, count * width)."""

    __slots__ = ("shape", "held", "address")

    def __init__(self, shape: tuple):
        self.shape, self.held, self.address = shape, None, 0

    def __call__(self, x, b) -> np.ndarray | None:
        """``x @ b`` laid out as above, or None where the kernel does not apply (as :func:`panels`) or
        the result's shape is not ``shape``."""
        if b is not self.held:
            if (b.__class__ is not np.ndarray or b.ndim != 3 or b.dtype != _F32 or b.shape[2] % 16
                    or b.shape[2] > MAX_WIDTH or not b.shape[1] or not b.flags.c_contiguous or library() is None):
                return None
            self.held, self.address = b, b.ctypes.data
        count, k, width = b.shape
        if x.__class__ is not np.ndarray or x.ndim != 2 or x.dtype is not _F32 or x.shape[1] != k:
            return None
        rows, columns = x.shape[0], count * width
        if not 0 < rows <= MAX_PANEL_ROWS or self.shape != (rows, columns):
            return None
        size = rows * k
        buffer = np.empty(size + rows * columns, np.float32)
        buffer[:size] = x.reshape(size)
        at = buffer.ctypes.data
        KERNELS.loaded["lib"].few_rows(at, k, 0, self.address, width, k * width, at + 4 * size, columns, width,
                                       count, rows, k, width)
        return buffer[size:].reshape(rows, columns)


def stacked(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` for stacks of the same leading shape, float32, each matrix's rows read along the
    last axis: ``a``'s matrices of at most 4 rows against ``b``'s of 16 to 64 columns (a multiple
    of 16; attention's ``weights @ values``), or ``a``'s of many rows against ``b``'s of at most 4
    columns (``keys @ q^T``), the large side of at least :data:`STACKED_FROM` elements; None where
    neither kernel applies. Leading axes whose matrices lie evenly apart in both stacks (every head
    of every sequence of a key store) are one kernel call; others are a call per index of the axes
    before the last one over 1."""
    if a.ndim < 3 or b.ndim != a.ndim:
        return None
    (m, k), n = a.shape[-2:], b.shape[-1]
    if m <= FEW and n % 16 == 0 and n <= MAX_WIDTH and k * n >= STACKED_FROM:  # the sizes first: most products
        rows = True                                                             # of a step are too small
    elif n <= FEW and k % 16 == 0 and k <= MAX_K and m * k >= STACKED_FROM and b.strides[-2] == 4 * n:
        rows = False
    else:
        return None
    if (a.shape[:-2] != b.shape[:-2] or a.dtype is not _F32 or b.dtype is not _F32 or not m or not n
            or 0 in a.shape[:-2] or a.strides[-1] != 4 or b.strides[-1] != 4 or min(a.strides) < 0
            or min(b.strides) < 0):
        return None
    lib = KERNELS.loaded.get("lib") or library()
    if lib is None:
        return None
    lead = a.shape[:-2]
    out = np.empty((*lead, m, n), np.float32)
    stride_a, stride_b = _even(lead, a.strides), _even(lead, b.strides)
    if stride_a is not None and stride_b is not None:  # the whole stack in one call
        calls = (((), math.prod(lead), stride_a, stride_b),)
    else:
        axis = max((i for i, size in enumerate(lead) if size > 1), default=len(lead) - 1)  # the last axis over 1
        calls = [(at, lead[axis], a.strides[axis] // 4, b.strides[axis] // 4) for at in np.ndindex(*lead[:axis])]
    for at, count, stride_a, stride_b in calls:
        x, y, o = (a[at], b[at], out[at]) if at else (a, b, out)
        if rows:
            lib.few_rows(x.ctypes.data, a.strides[-2] // 4, stride_a, y.ctypes.data, b.strides[-2] // 4, stride_b,
                         o.ctypes.data, n, m * n, count, m, k, n)
        else:
            lib.few_columns(x.ctypes.data, a.strides[-2] // 4, stride_a, y.ctypes.data, stride_b, o.ctypes.data,
                            m * n, count, m, k, n)
    return out


def _even(lead: tuple, strides: tuple) -> int | None:
    """The floats between consecutive matrices of a stack with leading shape ``lead`` where all of them
    lie that far apart in index order (axes of size 1 aside), else None."""
    step, span = None, 1
    for size, stride in zip(reversed(lead), reversed(strides[:len(lead)])):
        if size == 1:
            continue
        if step is None:
            step = stride
        elif stride != step * span:
            return None
        span *= size
    return (step or 0) // 4
