"""The NumPy backend's kernel for :class:`~tempo.ir.ops.AttentionOp`: attention of a block of
query rows, its scores in pieces that stay in the cache, its softmax one native pass.

:func:`reference` is the op's meaning in NumPy ops (the scores, scaled, masked,
their largest, the exponentials, their sums, the product, the division), the
result every other implementation is checked against. :func:`fused` computes
the same with the two products by BLAS and the softmax in between by
``numpy_attention.c`` (built with this machine's C compiler by
:mod:`tempo.runtime.native`): a piece of query rows at a time, the scores of
the keys those rows see (not the columns every row of the piece masks), the
softmax in place in two passes over each row while it is in the cache. The
scores held at once are one piece's (:data:`PIECE_FLOATS`), whatever the
block. Where the C source cannot be built, :func:`kernel` runs
:func:`reference`.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from tempo.ir import ops
from tempo.runtime import native

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numpy_attention.c")
_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {"softmax_rows": [_P, _I, _I, _P, _P, ctypes.c_float, _P]}
PIECE_FLOATS = 1 << 18  # scores of one piece of query rows (1 MB: a core's share of the cache)

KERNELS = native.Kernels(SOURCE, SIGNATURES, "the attention kernel is", "attention runs with NumPy ops")
library = KERNELS.library  # the loaded library, built at the first call; None where it cannot be
unavailable = KERNELS.unavailable  # why library() is None


def reference(op: ops.AttentionOp, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``softmax(scale * q @ k^T, masked) @ v`` as NumPy ops, the exponentials normalised after the
    product (``(e @ v) / sum(e)``). A query that sees no key gives NaN."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(op.scale)
    scores = np.where(op.visible(q.shape[-2], k.shape[-2]), scores, -np.inf)
    weights = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return np.matmul(weights, v) / np.sum(weights, axis=-1, keepdims=True)


def fused(op: ops.AttentionOp, q: np.ndarray, k: np.ndarray, v: np.ndarray, lib) -> np.ndarray:
    """:func:`reference` by ``lib``'s softmax (float32). The query matrices that share one key
    matrix (grouped-query attention: ``k`` and ``v`` broadcast along an axis of ``q``) are one
    matrix of rows, each position's queries together, so that each product reads its keys once."""
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    k, v = (x.reshape((1,) * (len(lead) + 2 - x.ndim) + x.shape) for x in (k, v))
    kv_lead = np.broadcast_shapes(k.shape[:-2], v.shape[:-2])
    keys, values = (np.broadcast_to(x, kv_lead + x.shape[-2:]) for x in (k, v))
    queries = np.broadcast_to(q, lead + q.shape[-2:])
    shared = tuple(a for a in range(len(lead)) if kv_lead[a] == 1 and lead[a] > 1)
    group = math.prod(lead[a] for a in shared)
    (count, width), depth = q.shape[-2:], v.shape[-1]
    lo, hi = (np.repeat(x, group) for x in op.seen(count, k.shape[-2]))
    out = np.empty(lead + (count, depth), np.float32)
    for idx in np.ndindex(*kv_lead):
        at = tuple(slice(None) if a in shared else i for a, i in enumerate(idx))
        rows = np.moveaxis(queries[at].reshape(group, count, width), 1, 0).reshape(count * group, width)
        mixed = _attend_rows(rows, keys[idx], values[idx], lo, hi, np.float32(op.scale), lib)
        out[at] = np.moveaxis(mixed.reshape(count, group, depth), 0, 1).reshape(out[at].shape)
    return out


def _attend_rows(rows: np.ndarray, keys: np.ndarray, values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 scale: np.float32, lib) -> np.ndarray:
    """Attention of the query ``rows`` (M, d) over ``keys`` (S, d) and ``values`` (S, e), row ``m``
    seeing keys ``lo[m]:hi[m]``: a piece of rows at a time, over the keys the piece sees."""
    count, total = rows.shape[0], keys.shape[0]
    piece = max(16, PIECE_FLOATS // max(total, 1))
    out = np.empty((count, values.shape[-1]), np.float32)
    scratch, sums = np.empty(min(piece, count) * total, np.float32), np.empty(piece, np.float32)
    for m in range(0, count, piece):
        end = min(count, m + piece)
        first, last = int(lo[m:end].min()), int(hi[m:end].max())
        scores = scratch[:(end - m) * (last - first)].reshape(end - m, last - first)
        np.matmul(rows[m:end], keys[first:last].T, out=scores)
        starts, stops = np.ascontiguousarray(lo[m:end] - first), np.ascontiguousarray(hi[m:end] - first)
        lib.softmax_rows(scores.ctypes.data, end - m, last - first, starts.ctypes.data, stops.ctypes.data,
                         scale, sums.ctypes.data)
        np.matmul(scores, values[first:last], out=out[m:end])
        out[m:end] /= sums[:end - m, None]
    return out


def kernel(op: ops.AttentionOp):
    """The op's kernel ``(inputs, env, point) -> (out,)``: :func:`fused` for float32 inputs where
    the C kernel is built, :func:`reference` otherwise."""
    def run(inputs, env, point):
        q, k, v = inputs
        lib = library()
        if lib is None or not all(x.dtype == np.float32 for x in inputs):
            return (reference(op, q, k, v),)
        return (fused(op, q, k, v, lib),)

    return run
