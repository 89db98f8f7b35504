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

:func:`step` is a decoding step's attention (a few queries a head against
its keys and values, and the prompt's) for every (sequence, head) pair in one
native call, the scores held in the cache between the keys' pass and the
values' (the NumPy backend's fused islands call it:
:mod:`tempo.runtime.backends.numpy_fused`); None where it does not apply.
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
SIGNATURES = {"softmax_rows": [_P, _I, _I, _P, _P, ctypes.c_float, _P],
              "attend_steps": [_P, _I, _I, _I, _I, _I, ctypes.c_float, _P]}
PIECE_FLOATS = 1 << 18  # scores of one piece of query rows (1 MB: a core's share of the cache)
MAX_GROUPS, MAX_PARTS, MAX_DEPTH = 4, 4, 64  # what attend_steps takes: queries a head, parts, floats a head
_F32 = np.dtype(np.float32)

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


def step(q: np.ndarray, parts: list, scale: float) -> np.ndarray | None:
    """A decoding step's attention as one native call for every (sequence, head) pair:
    ``softmax(s) @ V`` for the queries ``q`` (batch, kv heads, groups, head_dim), one softmax over
    the scores ``s`` of every part of ``parts``, each ``(scores, keys, values)`` with either ``keys``
    (batch, kv heads, S_i, head_dim), whose scores are ``scale * q @ keys^T`` (``scores`` None), or
    its ``scores`` (batch, kv heads, groups, S_i) given (``keys`` None), and ``values`` (batch, kv
    heads, S_i, head_dim): the step's own keys and the prompt's, say. Leading axes of 1 broadcast.
    None where the kernel does not take the arrays (another dtype, more than 4 groups or parts, a
    head size that is not a multiple of 16 up to 64, a head's rows not contiguous, an empty part, or
    the source not built)."""
    if q.__class__ is not np.ndarray or q.ndim != 4 or q.dtype is not _F32 or not 0 < len(parts) <= MAX_PARTS:
        return None
    batch, heads, groups, depth = q.shape
    if depth % 16 or not 0 < depth <= MAX_DEPTH or not 0 < groups <= MAX_GROUPS:
        return None
    queries = _described(q, batch, heads, (groups, depth))
    if queries is None or queries[4] != 1:
        q = np.ascontiguousarray(q)
        queries = _described(q, batch, heads, (groups, depth))
    out = np.empty(q.shape, np.float32)
    so = out.strides
    layout = [*queries[:4], out.ctypes.data, so[0] >> 2, so[1] >> 2, so[2] >> 2]
    width = 0
    for scores, keys, values in parts:
        given = keys is None
        x = scores if given else keys
        if x.__class__ is not np.ndarray or x.ndim != 4:
            return None
        rows = x.shape[3] if given else x.shape[2]
        seen = _described(x, batch, heads, (groups, rows) if given else (rows, depth))
        held = _described(values, batch, heads, (rows, depth))
        if not rows or seen is None or held is None or held[4] != 1 or not (given or seen[4] == 1):
            return None
        width += rows
        layout += [rows, int(given), *seen[:4], seen[4] if given else 0, *held[:4]]
    lib = KERNELS.loaded.get("lib") or library()
    if lib is None:
        return None
    described, scratch = np.array(layout, np.int64), np.empty(groups * width, np.float32)
    lib.attend_steps(described.ctypes.data, batch, heads, groups, depth, len(parts), np.float32(scale),
                     scratch.ctypes.data)
    return out


def _described(x, batch: int, heads: int, shape: tuple) -> tuple | None:
    """For a float32 array ``x`` (batch or 1, heads or 1, *shape), its strides whole floats: its address
    and its strides in floats (0 along a leading axis of 1: broadcast); None for any other ``x``."""
    if x.__class__ is not np.ndarray or x.dtype is not _F32 or x.ndim != 4:
        return None
    n0, n1, n2, n3 = x.shape
    s0, s1, s2, s3 = x.strides
    if n0 not in (batch, 1) or n1 not in (heads, 1) or (n2, n3) != shape or (s0 | s1 | s2 | s3) & 3:
        return None
    return x.ctypes.data, 0 if n0 == 1 else s0 >> 2, 0 if n1 == 1 else s1 >> 2, s2 >> 2, s3 >> 2


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
