"""jnp implementations of the sums and products that run in step order (:mod:`tempo.transforms.step_order`),
traced inside ``jax.jit``.

The same structure as :mod:`tempo.runtime.backends.numpy_ordered`: a sum adds
the rows of a ``(K, R)`` array one after another from +0, in a ``lax.scan`` (a
loop XLA does not reassociate, whose rows it holds as computed: a chain of
additions would be fused with the ops that compute its rows, and a product
there and an addition contracted into one rounding); a product whose rows are
steps is a batched ``dot`` of one product per block of rows, each of a shape
that does not depend on the number of steps; a contraction over steps
multiplies chunks of steps, one product per chunk (a batched ``dot``, or a
``lax.scan`` over more than :data:`UNROLLED`), and adds the products in order.
Each ``lax.scan`` is an XLA loop of its own, compiled apart
(``benchmarks/jax_ordered_compile.py``), so the kernels hold as few as their
order allows.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

STEPS = 32  # steps per product in a contraction over steps
ROWS = 128  # rows per product in a product of rows by one matrix
UNROLLED = 32  # at most this many products are added without a loop


def sum_along(x, axis: int):
    """``x`` summed along ``axis`` in index order, from +0 (keeping the axis, of size 1)."""
    y = jnp.moveaxis(x, axis, 0)
    rest = y.shape[1:]
    flat = y.reshape(y.shape[0], math.prod(rest))
    total, _ = lax.scan(lambda carry, row: (carry + row, None), jnp.zeros(flat.shape[1:], x.dtype), flat)
    return jnp.moveaxis((total + 0.0).astype(x.dtype).reshape((1,) + rest), 0, axis)


def ordered_sum(x, axes: tuple[int, ...], keepdims: bool = False):
    """``jnp.sum(x, axes)`` with each axis added in index order."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    for axis in axes:
        x = sum_along(x, axis)
    return x if keepdims or not axes else jnp.squeeze(x, axis=axes)


def ordered_mean(x, axes: tuple[int, ...], keepdims: bool = False):
    """``jnp.mean(x, axes)`` from :func:`ordered_sum`, divided by the count, which a barrier keeps
    from XLA's simplifier (it would multiply by the count's reciprocal, which rounds apart from a
    division)."""
    count = math.prod(x.shape[a] for a in axes)
    return ordered_sum(x, axes, keepdims) / lax.optimization_barrier(jnp.asarray(count, x.dtype))


def ordered_discounted_sum(x, gamma: float, axis: int):
    """``sum_k gamma**k x[k]`` along ``axis``, the terms added in index order."""
    y = jnp.moveaxis(x, axis, 0)
    powers = jnp.asarray((gamma ** np.arange(y.shape[0], dtype=np.float64)).astype(y.dtype))
    terms = powers.reshape((-1,) + (1,) * (y.ndim - 1)) * y
    return jnp.squeeze(sum_along(terms, 0), axis=0)


def _chunked(x, size: int):
    """``x`` with its first axis padded with zeros to a multiple of ``size`` (at least one) and split
    into ``(chunks, size, ...)``."""
    pad = -len(x) % size if len(x) else size
    x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
    return x.reshape((-1, size) + x.shape[1:])


def _added_in_order(product, pieces, shape, dtype):
    """``product`` of each piece, added one after another from +0: the products of at most
    :data:`UNROLLED` pieces as one batched product, those of more one by one in a ``lax.scan``."""
    if len(jax.tree_util.tree_leaves(pieces)[0]) > UNROLLED:
        total, _ = lax.scan(lambda carry, piece: (carry + product(piece), None), jnp.zeros(shape, dtype), pieces)
        return total + 0.0
    total = jnp.zeros(shape, dtype)
    for each in jax.vmap(product)(pieces):
        total = total + each
    return total + 0.0


def ordered_batch_contract(a, b, ordered: tuple[int, ...]):
    """``sum over the batch axes of a @ b`` (``(*batch, m, k), (*batch, k, n) -> (m, n)``), the
    step axes ``ordered`` added in order, :data:`STEPS` steps of the last one per product."""
    nb = a.ndim - 2
    m, n = a.shape[-2], b.shape[-1]
    rest = [k for k in range(nb) if k not in ordered]
    order = [*ordered, *rest, nb, nb + 1]
    a, b = jnp.transpose(a, order), jnp.transpose(b, order)
    outer = len(ordered) - 1
    points = math.prod(a.shape[:outer])
    a = a.reshape((points,) + a.shape[outer:])
    b = b.reshape((points,) + b.shape[outer:])
    pa = jnp.stack([_chunked(a[p], STEPS) for p in range(points)]) if points else a[:, None]
    pb = jnp.stack([_chunked(b[p], STEPS) for p in range(points)]) if points else b[:, None]
    pa, pb = pa.reshape((-1,) + pa.shape[2:]), pb.reshape((-1,) + pb.shape[2:])  # (pieces, STEPS, ..., m, k)

    def product(piece):
        piece_a, piece_b = piece
        rows = jnp.moveaxis(piece_a, -2, 0).reshape(m, -1)
        return jnp.dot(rows, piece_b.reshape(-1, n), precision="highest")

    return _added_in_order(product, (pa, pb), (m, n), jnp.result_type(a, b))


def ordered_matmul(a, b, rows: tuple[int, ...], inner: bool):
    """``a @ b`` computed so that each value is the same whatever the number of steps along
    ``a``'s step axes ``rows`` and, with ``inner``, along the contracted axis."""
    if inner:
        return _matmul_inner_in_order(a, b)
    if not rows:
        return jnp.matmul(a, b)
    return _rows_in_blocks(a, b, rows) if b.ndim <= 2 else _each_in_row_blocks(a, b)


def _rows_in_blocks(a, b, rows: tuple[int, ...]):
    """``a @ b`` for one matrix ``b``, the step axes ``rows`` first, the rows in blocks of whole
    steps (at least :data:`ROWS` rows, or one step's), one product per block."""
    lead = a.ndim - 1
    front = list(rows) + [k for k in range(lead) if k not in rows]
    moved = jnp.transpose(a, front + [lead])
    outer = len(rows) - 1
    shape = moved.shape
    per_step = max(math.prod(shape[outer + 1:-1]), 1)
    block = per_step * max(1, -(-ROWS // per_step))
    flat = moved.reshape((math.prod(shape[:outer]), -1, shape[-1]))
    count = flat.shape[1]
    blocks = jnp.stack([_chunked(points, block) for points in flat]) if len(flat) else flat[:, None]
    out = _per_block(blocks.reshape((-1,) + blocks.shape[2:]), b if b.ndim == 2 else b[:, None])
    out = out.reshape((len(flat), -1) + out.shape[2:])[:, :count]
    out = out.reshape(shape[:-1] + b.shape[1:])
    back = sorted(range(len(front)), key=front.__getitem__)
    return jnp.transpose(out, back + ([lead] if b.ndim > 1 else []))


def _per_block(blocks, b):
    """``blocks @ b`` (``(pieces, rows, k) @ (k, n)``) as a batched ``dot``: one product of the same
    shape per block, however many blocks there are."""
    stacked = jnp.broadcast_to(b, (blocks.shape[0],) + b.shape)
    return lax.dot_general(blocks, stacked, (((2,), (1,)), ((0,), (0,))), precision="highest")


def _each_in_row_blocks(a, b):
    """A stack of products whose row axis holds steps: each product's rows in blocks of :data:`ROWS`,
    one batched ``dot`` of a product per block."""
    m = a.shape[-2]
    blocks = _chunked(jnp.moveaxis(a, -2, 0), ROWS)  # (chunks, ROWS, ..., k)
    out = jnp.matmul(jnp.moveaxis(blocks, (0, 1), (-3, -2)), b[..., None, :, :], precision="highest")
    return out.reshape(out.shape[:-3] + (-1,) + out.shape[-1:])[..., :m, :]


def _matmul_inner_in_order(a, b):
    """``a @ b`` with the contracted axis in chunks of :data:`STEPS`, the chunks' products added
    in order from +0."""
    pa = _chunked(jnp.moveaxis(a, -1, 0), STEPS)  # (chunks, STEPS, ..., m)
    pb = _chunked(jnp.moveaxis(b, 0 if b.ndim == 1 else -2, 0), STEPS)  # (chunks, STEPS, ..., n)

    def product(piece):
        piece_a, piece_b = piece
        return jnp.matmul(jnp.moveaxis(piece_a, 0, -1), piece_b if b.ndim == 1 else jnp.moveaxis(piece_b, 0, -2),
                          precision="highest")

    shape = jax.eval_shape(jnp.matmul, a, b).shape
    return _added_in_order(product, (pa, pb), shape, jnp.result_type(a, b))
