"""The jnp implementation of each op, by op type (:data:`IMPLS`), traced inside ``jax.jit`` by the JAX
backend's islands and kernels (:mod:`tempo.runtime.backends.jax`).

Every step casts its inputs the way NumPy would, at trace time (JAX promotes
``int64 + float32`` to float32; NumPy to float64). A ``where`` that sets one
row of a buffer at a row the condition picks is a ``dynamic_update_slice`` of
that row (:func:`_row_write`), not a select over every row.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tempo.ir import ops
from tempo.runtime.backends import jax_native, jax_ordered
from tempo.runtime.backends import numpy as np_backend
from tempo.runtime.backends.base import along
from tempo.symbolic.evaluate import compile_expr, shape_at

IMPLS: dict[type, Callable] = {}  # op type -> (op, xs, env) -> tuple of outputs, traced inside jax.jit


def impl_for(op_type: type):
    def wrap(fn):
        IMPLS[op_type] = fn
        return fn

    return wrap


ELEMENTWISE = {
    "neg": jnp.negative, "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "abs": jnp.abs, "sin": jnp.sin,
    "cos": jnp.cos, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "relu": lambda x: jnp.maximum(x, 0),
    "not": jnp.logical_not, "sign": jnp.sign, "floor": jnp.floor, "ceil": jnp.ceil,
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.true_divide, "pow": jnp.power,
    "maximum": jnp.maximum, "minimum": jnp.minimum, "lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater,
    "ge": jnp.greater_equal, "eq": jnp.equal, "ne": jnp.not_equal, "and": jnp.logical_and,
    "or": jnp.logical_or, "mod": jnp.mod, "floordiv": jnp.floor_divide, "where": jnp.where,
}


def _np_result(np_fn: Callable, dtypes: list) -> np.dtype:
    return np.dtype(np_fn(*[np.ones((), d) for d in dtypes]).dtype)


def _same_dtype(xs: list) -> list:
    """``xs`` cast to the dtype NumPy would compute them in together."""
    common = np.result_type(*[x.dtype for x in xs])
    return [x if x.dtype == common else x.astype(common) for x in xs]


@impl_for(ops.ElementwiseOp)
def _elementwise(op: ops.ElementwiseOp, xs: list, env: dict) -> tuple:
    lead = 1 if op.fn == "where" else 0  # where's condition keeps its dtype
    dtypes = [np.dtype(x.dtype) for x in xs]
    out = _np_result(np_backend.ELEMENTWISE[op.fn], dtypes)
    common = np.result_type(*dtypes[lead:])
    compute = out if out.kind == "f" and common.kind != "f" else common
    args = xs[:lead] + [x if x.dtype == compute else x.astype(compute) for x in xs[lead:]]
    axis = _written_axis(*args) if op.fn == "where" else None
    result = ELEMENTWISE[op.fn](*args) if axis is None else _row_write(*args, axis)
    return (result if result.dtype == out else result.astype(out),)


def _written_axis(cond, row, rows) -> int | None:
    """The axis along which ``where(cond, row, rows)`` picks whole rows of ``rows`` (``cond`` varies
    along it alone), the same ``row`` in each: a K/V buffer's write of row ``t`` (``rows == t``); None
    where it does not."""
    shape = rows.shape
    if jnp.ndim(cond) != len(shape) or jnp.broadcast_shapes(cond.shape, jnp.shape(row), shape) != shape:
        return None
    over = [a for a, n in enumerate(cond.shape) if n > 1]
    if len(shape) < 2 or len(over) != 1 or cond.shape[over[0]] != shape[over[0]]:
        return None
    axis, lead = over[0], len(shape) - jnp.ndim(row)  # row's axes are rows' last ones
    return axis if axis < lead or row.shape[axis - lead] == 1 else None


def _row_write(cond, row, rows, axis: int):
    """``where(cond, row, rows)`` (see :func:`_written_axis`) as a ``dynamic_update_slice`` of each
    row ``cond`` picks along ``axis``, in a ``while_loop`` over them (one iteration for a write of row
    ``t``), so that XLA writes the row into the buffer in place rather than selecting over every row
    (a ``lax.cond`` between the update and the select would copy the buffer out of its branch)."""
    count = rows.shape[axis]
    picked = cond.reshape(count).astype(bool)
    index = jnp.arange(count)
    one = rows.shape[:axis] + (1,) + rows.shape[axis + 1:]
    new = jnp.broadcast_to(row, one).astype(rows.dtype)

    def following(at):
        """The first picked row after ``at`` (``count``: none)."""
        later = picked & (index > at)
        return jnp.where(later.any(), jnp.argmax(later), count)

    def write(state):
        at, buffer = state
        return following(at), lax.dynamic_update_slice_in_dim(buffer, new, at, axis)

    _, written = lax.while_loop(lambda state: state[0] < count, write, (following(-1), rows))
    return written


REDUCERS = {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min}
ORDERED = {"sum": jax_ordered.ordered_sum, "mean": jax_ordered.ordered_mean}


@impl_for(ops.ReduceOp)
def _reduce(op: ops.ReduceOp, xs: list, env: dict) -> tuple:
    x = xs[0]
    out = np.dtype(np_backend.REDUCERS[op.fn](np.ones((1,), x.dtype), axis=0).dtype)
    if not op.axes:
        return (x.astype(out),)
    if op.fn in ("sum", "mean"):
        x = x.astype(out)
    if op.ordered and op.fn in ORDERED and jnp.issubdtype(x.dtype, jnp.floating):
        return (ORDERED[op.fn](x, op.axes, op.keepdims).astype(out),)
    return (REDUCERS[op.fn](x, axis=op.axes, keepdims=op.keepdims).astype(out),)


def _moved(x, axis: int):
    return jnp.moveaxis(x, axis, 0)


@impl_for(ops.ScanOp)
def _scan(op: ops.ScanOp, xs: list, env: dict) -> tuple:
    x = _moved(xs[0], op.axis)
    if x.dtype == np.bool_ and op.gamma == 1.0:
        x = x.astype(np.int64)  # NumPy counts: a running sum of bools is int64
    if op.window:
        n = x.shape[0]
        padded = jnp.concatenate([jnp.zeros((op.window - 1, *x.shape[1:]), x.dtype), x])
        out = padded[0:n]
        for j in range(1, op.window):
            out = out + padded[j:j + n]
        return (jnp.moveaxis(out, 0, op.axis),)
    if op.gamma == 1.0:
        out = jnp.flip(jnp.cumsum(jnp.flip(x, 0), axis=0), 0) if op.reverse else jnp.cumsum(x, axis=0)
        return (jnp.moveaxis(out, 0, op.axis),)
    dtype = np.result_type(x.dtype, np.float32)
    x = x.astype(dtype)

    def step(carry, xk):
        carry = xk + op.gamma * carry
        return carry, carry

    _, out = lax.scan(step, jnp.zeros(x.shape[1:], dtype), x, reverse=op.reverse)
    return (jnp.moveaxis(out, 0, op.axis),)


@impl_for(ops.LinearScanOp)
def _linear_scan(op: ops.LinearScanOp, xs: list, env: dict) -> tuple:
    x, a = (_moved(v, op.axis) for v in xs)

    def step(carry, xa):
        carry = xa[0] + xa[1] * carry
        return carry, carry

    _, out = lax.scan(step, jnp.zeros(x.shape[1:], x.dtype), (x, a.astype(x.dtype)), reverse=op.reverse)
    return (jnp.moveaxis(out, 0, op.axis),)


@impl_for(ops.DiscountedSumOp)
def _discounted_sum(op: ops.DiscountedSumOp, xs: list, env: dict) -> tuple:
    if op.ordered:
        return (jax_ordered.ordered_discounted_sum(xs[0], op.gamma, op.axis),)
    x = _moved(xs[0], op.axis)
    weights = (op.gamma ** np.arange(x.shape[0], dtype=np.float64)).astype(x.dtype)
    return (jnp.tensordot(jnp.asarray(weights), x, axes=(0, 0)),)


@impl_for(ops.PadOp)
def _pad(op: ops.PadOp, xs: list, env: dict) -> tuple:
    x = xs[0]
    widths = [(0, 0)] * x.ndim
    widths[op.axis % x.ndim] = (int(compile_expr(op.before)(env)), int(compile_expr(op.after)(env)))
    return (jnp.pad(x, widths),)


@impl_for(ops.AttentionOp)
def _attention(op: ops.AttentionOp, xs: list, env: dict) -> tuple:
    """The NumPy reference's ops (:func:`.numpy_attention.reference`) in jnp."""
    q, k, v = _same_dtype(xs)
    scores = jnp.where(op.visible(q.shape[-2], k.shape[-2]), jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * op.scale,
                       -jnp.inf)
    weights = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    return (jnp.matmul(weights, v) / jnp.sum(weights, axis=-1, keepdims=True),)


def rows_contract(x, y):
    """``x.T @ y`` of a ``(rows, m)`` and a ``(rows, n)`` array: the sum over the rows of their outer
    products. Where a side has one column the product is spelled ``(1, rows) @ (rows, k)``, the form
    XLA on a CPU runs as it is; spelled ``x.T @ y`` it copies the other side transposed first (a
    critic's last weight gradient over 16,000 rows of 64, one thread: 0.24 ms, against 0.08)."""
    if y.shape[-1] == 1:
        return (y.reshape(1, -1) @ x).reshape(-1, 1)
    if x.shape[-1] == 1:
        return x.reshape(1, -1) @ y
    return x.T @ y


def _batch_contract(a, b):
    m, n = a.shape[-2], b.shape[-1]
    return rows_contract(jnp.swapaxes(a, -1, -2).reshape(-1, m), b.reshape(-1, n))


def _matmul(a, b):
    """``a @ b``: a few rows by a weight matrix's column panels, or stacks of matrices with a few
    rows or columns on one side, with the native kernels (:mod:`.jax_native`) where they apply."""
    out = jax_native.panel_product(a, b)
    if out is None:
        out = jax_native.stacked_product(a, b)
    return jnp.matmul(a, b) if out is None else out


def _cumsum(x, axis):
    return jnp.cumsum(x.astype(np.int64) if x.dtype == np.bool_ else x, axis=axis)


# Ops whose implementation is one jnp call on the inputs, the op's fields and the static environment.
SIMPLE: dict[type, Callable] = {
    ops.CumSumOp: lambda op, xs, env: _cumsum(xs[0], op.axis),
    ops.MatMulOp: lambda op, xs, env: (jax_ordered.ordered_matmul(*_same_dtype(xs), op.ordered_rows, op.ordered_inner)
                                       if op.ordered_rows or op.ordered_inner else _matmul(*_same_dtype(xs))),
    ops.BatchContractOp: lambda op, xs, env: (jax_ordered.ordered_batch_contract(*_same_dtype(xs), op.ordered)
                                              if op.ordered else _batch_contract(*_same_dtype(xs))),
    ops.PermuteOp: lambda op, xs, env: jnp.transpose(xs[0], op.axes),
    ops.SqueezeOp: lambda op, xs, env: jnp.squeeze(xs[0], axis=op.axis),
    ops.UnsqueezeOp: lambda op, xs, env: jnp.expand_dims(xs[0], axis=op.axis),
    ops.CatOp: lambda op, xs, env: jnp.concatenate(_same_dtype(xs), axis=op.axis),
    ops.CastOp: lambda op, xs, env: xs[0].astype(op.dtype),
    ops.IdentOp: lambda op, xs, env: xs[0],
    ops.ArgSortOp: lambda op, xs, env: jnp.argsort(xs[0], axis=op.axis, stable=True),
    ops.TakeOp: lambda op, xs, env: (jnp.take_along_axis(xs[0], along(op, xs[0], xs[1]), op.axis) if op.batch
                                     else jnp.take(xs[0], xs[1], axis=op.axis)),
    ops.ReshapeOp: lambda op, xs, env: jnp.reshape(xs[0], shape_at(op.shape, env)),
    ops.ExpandOp: lambda op, xs, env: jnp.broadcast_to(xs[0], shape_at(op.shape, env)),
}

for _op_type, _fn in SIMPLE.items():
    IMPLS[_op_type] = lambda op, xs, env, _fn=_fn: (_fn(op, xs, env),)
