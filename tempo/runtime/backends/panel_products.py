"""The NumPy backend's product of a few float32 rows by a matrix stored as column panels.

:mod:`tempo.transforms.pack_weights` stores a decoding step's constant weights
as panels, ``(count, k, width)``, and multiplies them as
``x[..., None, :, :] @ panels``. ``panel_products.c`` (built with this
machine's C compiler by :mod:`tempo.runtime.native`) computes that product
reading each panel once, front to back, with software prefetch, at the rate a
plain read of the same bytes runs (``benchmarks/panel_products.py``), where
NumPy's matrix-vector products reach 0.75-0.85x of it. :func:`product` returns
None where the kernel does not apply (another dtype or layout, or the source
not built: :func:`unavailable` says why) and the caller multiplies with NumPy.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from tempo.runtime import native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "panel_products.c")
_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {"panel_product": [_P, _P, _P, _I, _I, _I, _I]}
MAX_WIDTH = 64  # columns per panel the kernel takes (a multiple of 16)
MAX_ROWS = 32   # input rows it takes (more are compute-bound: NumPy's matrix product)

_loaded: dict = {}


def library():
    """The loaded kernel (``panel_product``), built at the first call; None where it cannot be
    (:func:`unavailable` says why)."""
    if "lib" not in _loaded:
        _loaded["lib"], _loaded["why"] = None, None
        try:
            _loaded["lib"] = native.load(SOURCE, SIGNATURES)
        except OSError as err:
            _loaded["why"] = f"the panel product kernel is not built ({err}); panel products run with NumPy"
    return _loaded["lib"]


def unavailable() -> str | None:
    """Why :func:`library` is None (None when it is loaded)."""
    library()
    return _loaded["why"]


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` for ``a`` (..., 1, m, k), one matrix of ``m`` rows (every leading axis 1), and
    ``b`` (count, k, width) float32 panels, C-ordered: (..., count, m, width); None where the
    kernel does not apply."""
    if (b.ndim != 3 or a.ndim < 3 or a.shape[-3] != 1 or a.shape[-1] != b.shape[1]
            or a.dtype != np.float32 or b.dtype != np.float32 or not b.flags.c_contiguous
            or b.shape[2] % 16 or b.shape[2] > MAX_WIDTH or a.shape[-2] > MAX_ROWS
            or math.prod(a.shape[:-2]) != 1 or library() is None):
        return None
    count, k, width = b.shape
    rows = a.shape[-2]
    x = np.ascontiguousarray(a.reshape(rows, k))
    out = np.empty((*a.shape[:-3], count, rows, width), np.float32)
    _loaded["lib"].panel_product(b.ctypes.data, x.ctypes.data, out.ctypes.data, count, k, rows, width)
    return out
