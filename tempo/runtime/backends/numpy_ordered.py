"""NumPy kernels for the sums and products that run in step order (:mod:`tempo.transforms.step_order`).

Each gives, for the steps a program has, the same bits whether or not more
steps holding 0 follow (a dim ended at ``T[i]`` against the same dim run to
its cap with the steps past the end masked): what it adds along a step axis
it adds one step after another, starting from +0, so a trailing 0 (or -0)
changes nothing; and each BLAS call it makes has a shape that does not
depend on how many steps there are, so BLAS groups the terms of every value
the same way.

* A sum or a mean adds along each reduced axis in index order (NumPy adds
  the rows of a C-ordered ``(K, R)`` array one after another when ``R > 1``;
  its pairwise summation runs only along the contiguous axis it reduces).
* A contraction over batch axes (a weight's gradient) multiplies chunks of
  :data:`STEPS` steps of the last step axis, the last chunk padded with
  zero steps, one product per chunk and per point of the other step axes,
  and adds the products in order.
* A product of a stack of rows by one matrix (a layer applied to every step)
  computes the rows in blocks of whole steps (at least :data:`ROWS` rows, or
  one step's), the step axes outermost, the last block padded with zero
  rows: BLAS computes a row of a product differently depending on how many
  rows it has. A stack of products whose row axis holds steps does the same
  per product.
* A product that contracts over steps multiplies chunks of :data:`STEPS`
  of them and adds the chunks' products in order.
"""
from __future__ import annotations

import math

import numpy as np

STEPS = 32  # steps per product in a contraction over steps
ROWS = 128  # rows per product in a product of rows by one matrix


def sum_along(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` summed along ``axis`` in index order, from +0 (keeping the axis, of size 1)."""
    y = np.asarray(x)
    order = _to_front(y.ndim, axis)
    if order is not None:
        y = y.transpose(order)
    rest = y.shape[1:]
    flat = np.ascontiguousarray(y.reshape(len(y), math.prod(rest)))  # rows one after another in memory
    if len(y) == 0:
        out = np.zeros(flat.shape[1:], flat.dtype)
    elif flat.shape[1] == 1:  # one value per row: NumPy's reduce would sum it pairwise
        out = np.add.accumulate(flat[:, 0])[-1:]
    else:
        out = np.add.reduce(flat, axis=0)
    out = (out + 0.0).astype(flat.dtype, copy=False).reshape((1,) + rest)
    return out if order is None else out.transpose(_inverse(order))


def ordered_sum(x, axes: tuple[int, ...], keepdims: bool = False):
    """``np.sum(x, axes)`` with each axis added in index order (see the module docstring). An axis
    of one element holds its sum already: only ``+ 0.0`` (no -0) is left to do."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return np.add.reduce(x, axis=axes, keepdims=keepdims)  # exact: any order gives the same
    ndim, shape = x.ndim, x.shape
    axes = tuple(sorted(a % ndim for a in axes))
    summed = [a for a in axes if shape[a] != 1]
    if axes and not summed:
        x = (x + 0.0).astype(x.dtype, copy=False)
    for axis in summed:
        x = sum_along(x, axis)
    return x if keepdims else x.reshape(tuple(n for k, n in enumerate(x.shape) if k not in axes))


def _to_front(ndim: int, axis: int) -> list[int] | None:
    """The axes' order that puts ``axis`` first, the others in their order (None: it is first)."""
    return None if axis == 0 else [axis, *range(axis), *range(axis + 1, ndim)]


def _inverse(order: list[int]) -> list[int]:
    """The axes' order that undoes ``order``."""
    back = [0] * len(order)
    for k, a in enumerate(order):
        back[a] = k
    return back


def ordered_mean(x, axes: tuple[int, ...], keepdims: bool = False):
    """``np.mean(x, axes)`` from :func:`ordered_sum`, divided by the count as NumPy does."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return np.mean(x, axis=axes, keepdims=keepdims)
    count = math.prod(x.shape[a] for a in axes)
    return np.true_divide(ordered_sum(x, axes, keepdims), count)


def ordered_discounted_sum(x: np.ndarray, gamma: float, axis: int) -> np.ndarray:
    """``sum_k gamma**k x[k]`` along ``axis``, the terms added in index order."""
    y = np.moveaxis(np.asarray(x), axis, 0)
    weights = (gamma ** np.arange(len(y), dtype=np.float64)).astype(y.dtype)
    terms = weights.reshape((-1,) + (1,) * (y.ndim - 1)) * y
    return np.squeeze(sum_along(terms, 0), axis=0)


def _dense(x: np.ndarray) -> np.ndarray:
    """``x`` in C order with the strides of a fresh array (a view where it is C-contiguous already):
    NumPy's ``matmul`` picks its BLAS call, and so how it groups terms, by the operands' strides,
    those of size-1 axes included."""
    x = np.asarray(x)
    strides, step = [], x.itemsize
    for n in reversed(x.shape):
        strides.append(step)
        step *= n
    canonical = tuple(reversed(strides))
    if canonical == x.strides:
        return x
    if x.flags.c_contiguous:  # only the strides of size-1 axes differ: they are never stepped over
        return np.lib.stride_tricks.as_strided(x, x.shape, canonical, writeable=False)
    return np.array(x, order="C")


def _pieces(x: np.ndarray, size: int):
    """``x`` (C-ordered, fresh strides) in pieces of ``size`` along its first axis: views, the last
    one a copy padded with zeros to ``size``. Each piece has a fresh array's strides."""
    for start in range(0, len(x), size):
        piece = x[start:start + size]
        if len(piece) < size:
            piece = np.concatenate([piece, np.zeros((size - len(piece),) + x.shape[1:], x.dtype)])
        yield piece


def _chunked(x: np.ndarray, size: int) -> np.ndarray:
    """``x`` with its first axis padded with zeros to a multiple of ``size`` and split into
    ``(chunks, size, ...)``."""
    pad = -len(x) % size
    if pad:
        x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
    return x.reshape((-1, size) + x.shape[1:])


def ordered_batch_contract(a: np.ndarray, b: np.ndarray, ordered: tuple[int, ...]) -> np.ndarray:
    """``sum over the batch axes of a @ b`` (``(*batch, m, k), (*batch, k, n) -> (m, n)``), the
    step axes ``ordered`` added in order, :data:`STEPS` steps of the last one per product."""
    nb = a.ndim - 2
    m, n = a.shape[-2], b.shape[-1]
    rest = [k for k in range(nb) if k not in ordered]
    order = [*ordered, *rest, nb, nb + 1]
    a, b = _dense(np.transpose(a, order)), _dense(np.transpose(b, order))
    outer = len(ordered) - 1  # step axes before the chunked one: one product per point of them
    points = math.prod(a.shape[:outer])
    a = a.reshape((points,) + a.shape[outer:])
    b = b.reshape((points,) + b.shape[outer:])
    total = np.zeros((m, n), np.result_type(a, b))
    for p in range(points):
        for piece_a, piece_b in zip(_pieces(a[p], STEPS), _pieces(b[p], STEPS)):
            total = total + _contract(piece_a, piece_b, m, n)
    return total


def _contract(a: np.ndarray, b: np.ndarray, m: int, n: int) -> np.ndarray:
    """``a`` ``(steps, *rest, m, k)``, ``b`` ``(steps, *rest, k, n)`` (fresh strides): their
    product contracting every axis but ``m`` and ``n``, one BLAS call."""
    k = a.shape[-1]
    rows = a.reshape(-1, m).T if k == 1 else np.moveaxis(a, -2, 0).reshape(m, -1)  # (m, steps * rest * k)
    return np.matmul(rows, b.reshape(-1, n))


def ordered_matmul(a: np.ndarray, b: np.ndarray, rows: tuple[int, ...], inner: bool) -> np.ndarray:
    """``a @ b`` computed so that each value is the same whatever the number of steps along
    ``a``'s step axes ``rows`` and, with ``inner``, along the contracted axis."""
    if inner:
        return _matmul_inner_in_order(a, b)
    if not rows:
        return np.matmul(a, b)
    return _rows_in_blocks(a, b, rows) if b.ndim <= 2 else _each_in_row_blocks(a, b)


def _rows_in_blocks(a: np.ndarray, b: np.ndarray, rows: tuple[int, ...]) -> np.ndarray:
    """``a @ b`` for one matrix ``b``: every leading axis of ``a`` holds rows; the step axes
    ``rows`` go first, and the rows go in blocks of whole steps, at least :data:`ROWS` rows or
    one step's, one product each."""
    lead, b = a.ndim - 1, _dense(b)
    front = list(rows) + [k for k in range(lead) if k not in rows]
    moved = _dense(np.transpose(a, front + [lead]))
    outer = len(rows) - 1  # step axes before the last one: rows of each point of them on their own
    shape = moved.shape
    per_step = math.prod(shape[outer + 1:-1])
    block = max(per_step, 1) * max(1, -(-ROWS // max(per_step, 1)))
    flat = moved.reshape((math.prod(shape[:outer]), -1, shape[-1]))
    out = np.empty(flat.shape[:2] + b.shape[1:], np.result_type(a, b))
    for p, points in enumerate(flat):
        for start, piece in zip(range(0, len(points), block), _pieces(points, block)):
            out[p, start:start + block] = np.matmul(piece, b)[:len(points) - start]
    out = out.reshape(shape[:-1] + b.shape[1:])
    return np.transpose(out, _inverse(front) + ([lead] if b.ndim > 1 else []))


def _each_in_row_blocks(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A stack of products whose row axis holds steps: each product's rows in blocks of :data:`ROWS`."""
    m = a.shape[-2]
    blocks = np.moveaxis(_chunked(np.moveaxis(a, -2, 0), ROWS), (0, 1), (-3, -2))  # (..., chunks, ROWS, k)
    out = np.matmul(_dense(blocks), _dense(b)[..., None, :, :])
    return out.reshape(out.shape[:-3] + (-1,) + out.shape[-1:])[..., :m, :]


def _matmul_inner_in_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with the contracted axis in chunks of :data:`STEPS`, the chunks' products added
    in order."""
    vector_a, vector_b = a.ndim == 1, b.ndim == 1
    a = a[None, :] if vector_a else a
    b = b[:, None] if vector_b else b
    pieces_a = _chunked(np.moveaxis(a, -1, 0), STEPS)   # (chunks, STEPS, ..., m)
    pieces_b = _chunked(np.moveaxis(b, -2, 0), STEPS)   # (chunks, STEPS, ..., n)
    pa = np.moveaxis(pieces_a, 1, -1)                   # (chunks, ..., m, STEPS)
    pb = np.moveaxis(pieces_b, 1, -2)                   # (chunks, ..., STEPS, n)
    batch = max(pa.ndim, pb.ndim) - 3  # the stacks' batch axes, aligned after the chunks' axis
    pa = pa.reshape(pa.shape[:1] + (1,) * (batch - pa.ndim + 3) + pa.shape[1:])
    pb = pb.reshape(pb.shape[:1] + (1,) * (batch - pb.ndim + 3) + pb.shape[1:])
    out = ordered_sum(np.matmul(_dense(pa), _dense(pb)), (0,))
    if vector_b:
        out = out[..., 0]
    if vector_a:
        out = out[..., 0, :] if not vector_b else out[..., 0]
    return out
