"""PyTorch kernels for the sums and products that run in step order (:mod:`tempo.transforms.step_order`).

The same structure as :mod:`tempo.runtime.backends.numpy_ordered`, so that on
the CPU each gives, for the steps a program has, the same bits whether or not
more steps holding 0 follow (a dim ended at ``T[i]`` against the same dim run
to its cap with the steps past the end masked):

* A sum or a mean adds along each reduced axis in index order, from +0, in
  the values' dtype, so a trailing 0 (or -0) changes nothing: NumPy's
  ordered sums, bit for bit.
* A contraction over batch axes (a weight's gradient) multiplies chunks of
  :data:`STEPS` steps of the last step axis, the last chunk padded with zero
  steps, one product per chunk and per point of the other step axes, and
  adds the products in order.
* A product of a stack of rows by one matrix computes the rows in blocks of
  whole steps (at least :data:`ROWS` rows, or one step's), the step axes
  outermost, the last block padded with zero rows, each block contiguous:
  BLAS computes a row differently depending on how many rows it has. A stack
  of products whose row axis holds steps does the same per product.
* A product that contracts over steps multiplies chunks of :data:`STEPS` of
  them and adds the chunks' products in order.

Every product is one ``torch.matmul`` of operands in buffers of their own,
of a shape that does not depend on the number of steps, so BLAS groups the
terms of every value the same way. The products are MKL's, which rounds
apart from NumPy's BLAS: the two backends agree within rounding, each with
itself bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from tempo.runtime.backends import numpy_ordered

NP_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
NUMPY_SUMS = tuple(NP_DTYPES)  # dtypes NumPy sums on torch's CPU memory
STEPS = 32  # steps per product in a contraction over steps
ROWS = 128  # rows per product in a product of rows by one matrix


def sum_along(x: torch.Tensor, axis: int) -> torch.Tensor:
    """``x`` summed along ``axis`` in index order, from +0 (keeping the axis, of size 1). On the CPU
    NumPy adds the rows in place in torch's memory (:func:`.numpy_ordered.sum_along`), else
    :func:`rows_in_order` does, one torch call a row: the same bits either way."""
    if x.device.type == "cpu" and x.dtype in NUMPY_SUMS:
        return torch.from_numpy(numpy_ordered.sum_along(x.detach().numpy(), axis))
    y = torch.movedim(x, axis, 0)
    return torch.movedim(rows_in_order(y.reshape(y.shape[0], -1)).reshape((1,) + tuple(y.shape[1:])), 0, axis)


def rows_in_order(flat: torch.Tensor) -> torch.Tensor:
    """The rows of ``flat`` ``(K, R)`` added one after another from +0, in its dtype: ``(1, R)``."""
    total = torch.zeros((1, flat.shape[1]), dtype=flat.dtype, device=flat.device)
    for row in flat:
        total.add_(row)
    return total


def ordered_sum(x: torch.Tensor, axes: tuple[int, ...], keepdims: bool = False) -> torch.Tensor:
    """``torch.sum(x, axes)`` with each axis added in index order (see the module docstring)."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    for axis in axes:
        x = sum_along(x, axis)
    return x if keepdims or not axes else torch.squeeze(x, dim=axes)


def ordered_mean(x: torch.Tensor, axes: tuple[int, ...], keepdims: bool = False) -> torch.Tensor:
    """``torch.mean(x, axes)`` from :func:`ordered_sum`, divided by the count."""
    count = math.prod(x.shape[a] for a in axes)
    return torch.div(ordered_sum(x, axes, keepdims), count)


def ordered_discounted_sum(x: torch.Tensor, gamma: float, axis: int) -> torch.Tensor:
    """``sum_k gamma**k x[k]`` along ``axis``, the terms added in index order."""
    y = torch.movedim(x, axis, 0)
    powers = torch.as_tensor((gamma ** np.arange(y.shape[0], dtype=np.float64)).astype(NP_DTYPES[y.dtype]),
                             device=x.device)
    terms = powers.reshape((-1,) + (1,) * (y.ndim - 1)) * y
    return torch.squeeze(sum_along(terms, 0), dim=0)


def _fresh(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a fresh buffer holds it: C-ordered strides, those of size-1 axes included, from a
    start aligned to 64 bytes (a copy where ``x`` is not already so). MKL computes a product
    differently depending on its operands' strides and on where their data starts in memory."""
    canonical = tuple(math.prod(x.shape[k + 1:]) for k in range(x.ndim))
    if x.stride() == canonical and x.data_ptr() % 64 == 0:
        return x
    return x.clone(memory_format=torch.contiguous_format)


def _pieces(x: torch.Tensor, size: int):
    """``x`` in pieces of ``size`` along its first axis (views), the last one padded with zeros."""
    for start in range(0, len(x), size):
        piece = x[start:start + size]
        if len(piece) < size:
            piece = torch.cat([piece, piece.new_zeros((size - len(piece),) + tuple(x.shape[1:]))])
        yield piece


def _chunked(x: torch.Tensor, size: int) -> torch.Tensor:
    """``x`` with its first axis padded with zeros to a multiple of ``size`` and split into
    ``(chunks, size, ...)``."""
    pad = -len(x) % size
    if pad:
        x = torch.cat([x, x.new_zeros((pad,) + tuple(x.shape[1:]))])
    return x.reshape((-1, size) + tuple(x.shape[1:]))


def ordered_batch_contract(a: torch.Tensor, b: torch.Tensor, ordered: tuple[int, ...]) -> torch.Tensor:
    """``sum over the batch axes of a @ b`` (``(*batch, m, k), (*batch, k, n) -> (m, n)``), the
    step axes ``ordered`` added in order, :data:`STEPS` steps of the last one per product."""
    nb = a.ndim - 2
    m, n = a.shape[-2], b.shape[-1]
    rest = [k for k in range(nb) if k not in ordered]
    order = [*ordered, *rest, nb, nb + 1]
    a, b = torch.permute(a, order), torch.permute(b, order)
    outer = len(ordered) - 1  # step axes before the chunked one: one product per point of them
    points = math.prod(a.shape[:outer])
    a = a.reshape((points,) + tuple(a.shape[outer:]))
    b = b.reshape((points,) + tuple(b.shape[outer:]))
    total = torch.zeros((m, n), dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for p in range(points):
        for piece_a, piece_b in zip(_pieces(a[p], STEPS), _pieces(b[p], STEPS)):
            total = total + _contract(piece_a, piece_b, m, n)
    return total


def _contract(a: torch.Tensor, b: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """``a`` ``(steps, *rest, m, k)``, ``b`` ``(steps, *rest, k, n)``: their product contracting
    every axis but ``m`` and ``n``, one BLAS call on operands laid out as fresh buffers."""
    if a.shape[-1] == 1:  # (steps * rest, m) transposed: BLAS reads it as it lies
        rows = _fresh(a.reshape(-1, m)).T
    else:
        rows = _fresh(torch.movedim(a, -2, 0).reshape(m, -1))  # (m, steps * rest * k)
    return torch.matmul(rows, _fresh(b.reshape(-1, n)))


def ordered_matmul(a: torch.Tensor, b: torch.Tensor, rows: tuple[int, ...], inner: bool) -> torch.Tensor:
    """``a @ b`` computed so that each value is the same whatever the number of steps along
    ``a``'s step axes ``rows`` and, with ``inner``, along the contracted axis."""
    if inner:
        return _matmul_inner_in_order(a, b)
    if not rows:
        return torch.matmul(a, b)
    return _rows_in_blocks(a, b, rows) if b.ndim <= 2 else _each_in_row_blocks(a, b)


def _rows_in_blocks(a: torch.Tensor, b: torch.Tensor, rows: tuple[int, ...]) -> torch.Tensor:
    """``a @ b`` for one matrix ``b``: every leading axis of ``a`` holds rows; the step axes
    ``rows`` go first, and the rows go in blocks of whole steps, at least :data:`ROWS` rows or
    one step's, one product each."""
    lead, b = a.ndim - 1, _fresh(b)
    front = list(rows) + [k for k in range(lead) if k not in rows]
    moved = torch.permute(a, front + [lead])
    outer = len(rows) - 1  # step axes before the last one: rows of each point of them on their own
    shape = tuple(moved.shape)
    per_step = max(math.prod(shape[outer + 1:-1]), 1)
    block = per_step * max(1, -(-ROWS // per_step))
    flat = moved.reshape((math.prod(shape[:outer]), -1, shape[-1]))
    out = torch.empty(tuple(flat.shape[:2]) + tuple(b.shape[1:]),
                      dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for p in range(len(flat)):
        points = flat[p]
        for start, piece in zip(range(0, len(points), block), _pieces(points, block)):
            out[p, start:start + block] = torch.matmul(_fresh(piece), b)[:len(points) - start]
    out = out.reshape(shape[:-1] + tuple(b.shape[1:]))
    back = sorted(range(len(front)), key=front.__getitem__)
    return torch.permute(out, back + ([lead] if b.ndim > 1 else []))


def _each_in_row_blocks(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A stack of products whose row axis holds steps: each product's rows in blocks of :data:`ROWS`,
    one batched product per block (torch's batched product groups terms by the batch's size)."""
    m, b = a.shape[-2], _fresh(b)
    rows = torch.movedim(a, -2, 0)  # (m, ..., k)
    blocks = [torch.matmul(_fresh(torch.movedim(piece, 0, -2)), b) for piece in _pieces(rows, ROWS)]
    return torch.cat(blocks, dim=-2)[..., :m, :] if blocks else torch.matmul(a, b)


def _matmul_inner_in_order(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` with the contracted axis in chunks of :data:`STEPS`, the chunks' products added
    in order from +0."""
    if a.shape[-1] == 0:
        return torch.matmul(a, b)
    chunks_a = _pieces(torch.movedim(a, -1, 0), STEPS)  # (STEPS, ..., m)
    chunks_b = _pieces(torch.movedim(b, 0 if b.ndim == 1 else -2, 0), STEPS)  # (STEPS, ..., n)
    total = None
    for piece_a, piece_b in zip(chunks_a, chunks_b):
        product = torch.matmul(_fresh(torch.movedim(piece_a, 0, -1)),
                               _fresh(piece_b if b.ndim == 1 else torch.movedim(piece_b, 0, -2)))
        total = product + 0.0 if total is None else total + product
    return total
