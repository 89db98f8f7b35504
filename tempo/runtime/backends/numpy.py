"""The NumPy reference backend: one plain kernel per op type, no JIT.

Every other backend is checked against this one.
"""
from __future__ import annotations

import functools
import itertools
import math
import operator
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.runtime import counter_rng
from tempo.runtime.backends import huge_pages, skinny_products
from tempo.runtime.backends.base import Backend, Kernel, along
from tempo.runtime.backends.numpy_attention import kernel as attention_kernel
from tempo.runtime.backends.numpy_fused import cast, compile_island
from tempo.runtime.backends.numpy_ordered import (ordered_batch_contract, ordered_discounted_sum, ordered_matmul,
                                                  ordered_mean, ordered_sum)
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import bound_of, seq

KERNELS: dict[type, Callable[[ops.Op], Kernel]] = {}


def kernel_for(op_type: type):
    def wrap(factory):
        KERNELS[op_type] = factory
        return factory

    return wrap


def _sigmoid(x):
    """``1 / (1 + exp(-x))``; for a float array in one buffer, each step written over the last (the
    same values, without three temporaries the size of ``x``: the prefill's SwiGLU takes a
    (P, intermediate) sigmoid a layer)."""
    if x.__class__ is not np.ndarray or x.dtype.kind != "f" or not x.ndim:  # (NumPy makes a 0-d result a scalar)
        return 1.0 / (1.0 + np.exp(-x))
    out = np.negative(x)
    np.exp(out, out=out)
    out += out.dtype.type(1)
    return np.reciprocal(out, out=out)


ELEMENTWISE = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin,
    "cos": np.cos, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "not": np.logical_not, "sign": np.sign, "floor": np.floor, "ceil": np.ceil,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and,
    "or": np.logical_or, "mod": np.mod, "floordiv": np.floor_divide, "where": np.where,
}
REDUCERS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
MEAN_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # where np.mean is the sum divided by the count


def _mean(x, axis, keepdims: bool = False):
    """``np.mean(x, axis, keepdims=keepdims)``, bit for bit; for a float32 or float64 array, its sum
    divided by the count in place, without np.mean's Python wrapper (whose argument handling costs
    more than the sums of a decoding step's norms: two means a layer)."""
    if x.__class__ is not np.ndarray or x.dtype not in MEAN_DTYPES:
        return np.mean(x, axis, keepdims=keepdims)
    total = np.add.reduce(x, axis, keepdims=keepdims)
    axes = (axis,) if isinstance(axis, int) else axis
    count = x.size if axis is None else math.prod(x.shape[a] for a in axes)
    if total.__class__ is not np.ndarray:  # a 0-d result is a scalar: divided as np.mean divides it
        return total.dtype.type(total / count)
    return np.true_divide(total, count, out=total)


REDUCTIONS = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "mean": _mean}
"""The reductions ``np.sum``, ``np.max``, ``np.min`` and ``np.mean`` run, called without their Python wrapper."""
ORDERED = {"sum": ordered_sum, "mean": ordered_mean}
"""A sum or mean whose ``ReduceOp`` is ``ordered``: each axis added in index order (:mod:`.numpy_ordered`)."""


@kernel_for(ops.ConstOp)
def _const(op: ops.ConstOp) -> Kernel:
    value = op.value.array
    return lambda inputs, env, point: (value[point] if op.num_domain_axes else value,)


@kernel_for(ops.EvalSymbolOp)
def _eval_symbol(op: ops.EvalSymbolOp) -> Kernel:
    fn = compile_expr(op.expr)
    if not op.vectorized:
        return lambda inputs, env, point: (np.asarray(fn(env), dtype=np.int64),)
    names, bounds = [d.name for d in op.vectorized], [bound_of(d).name for d in op.vectorized]

    def run(inputs, env, point):
        sizes, local = tuple(env[b] for b in bounds), dict(env)
        out = np.empty(sizes, dtype=np.int64)
        for idx in np.ndindex(*sizes):
            local.update(zip(names, idx))
            out[idx] = fn(local)
        return (out,)

    return run


@kernel_for(ops.RandomOp)
def _random(op: ops.RandomOp) -> Kernel:
    """The numbers at the point from a :class:`~tempo.runtime.counter_rng.Lattice` built once for the op."""
    sizes, axis_of = _sizes(op.shape), {d: k for k, d in enumerate(op.vectorized)}
    draw = counter_rng.Lattice(op.dist, op.stream, op.dtype, [axis_of.get(d) for d in op.dims],
                               op.offsets or (0,) * len(op.dims))
    if not op.vectorized:
        return lambda inputs, env, point: (draw(point, (), sizes(env)),)
    bounds = [bound_of(d).name for d in op.vectorized]
    return lambda inputs, env, point: (draw(point, tuple([env[b] for b in bounds]), sizes(env)),)


KERNELS[ops.AttentionOp] = attention_kernel


@kernel_for(ops.ScanOp)
def _scan(op: ops.ScanOp) -> Kernel:
    def run(inputs, env, point):
        x = np.moveaxis(inputs[0], op.axis, 0)
        if op.window:
            padded = np.concatenate([np.zeros((op.window - 1, *x.shape[1:]), x.dtype), x])
            out = np.lib.stride_tricks.sliding_window_view(padded, op.window, axis=0).sum(axis=-1)
            return (np.moveaxis(out, 0, op.axis),)
        if op.reverse:
            x = x[::-1]
        if op.gamma == 1.0:
            out = np.cumsum(x, axis=0)
        else:
            out = np.empty_like(x, dtype=np.result_type(x.dtype, np.float32))
            carry = np.zeros_like(out[0]) if len(x) else None
            for k in range(len(x)):
                carry = x[k] + op.gamma * carry
                out[k] = carry
        if op.reverse:
            out = out[::-1]
        return (np.moveaxis(out, 0, op.axis),)

    return run


@kernel_for(ops.LinearScanOp)
def _linear_scan(op: ops.LinearScanOp) -> Kernel:
    def run(inputs, env, point):
        x, a = (np.moveaxis(v, op.axis, 0) for v in inputs)
        steps = range(len(x) - 1, -1, -1) if op.reverse else range(len(x))
        out = np.empty_like(x)
        carry = np.zeros_like(x[0]) if len(x) else None
        for k in steps:
            carry = x[k] + a[k] * carry
            out[k] = carry
        return (np.moveaxis(out, 0, op.axis),)

    return run


@kernel_for(ops.DiscountedSumOp)
def _discounted_sum(op: ops.DiscountedSumOp) -> Kernel:
    if op.ordered:
        return lambda inputs, env, point: (ordered_discounted_sum(inputs[0], op.gamma, op.axis),)

    def run(inputs, env, point):
        x = np.moveaxis(inputs[0], op.axis, 0)
        weights = op.gamma ** np.arange(x.shape[0], dtype=np.float64)
        return (np.tensordot(weights.astype(x.dtype), x, axes=(0, 0)),)

    return run


def _sizes(shape) -> Callable[[dict], tuple]:
    if all(isinstance(s, int) for s in shape):
        static = tuple(shape)
        return lambda env: static
    fns = [compile_expr(s) if not isinstance(s, int) else (lambda env, s=s: s) for s in shape]
    return lambda env: tuple(int(f(env)) for f in fns)


@kernel_for(ops.ReshapeOp)
def _reshape(op: ops.ReshapeOp) -> Kernel:
    sizes = _sizes(op.shape)
    return lambda inputs, env, point: (_reshaped(inputs[0], sizes(env)),)


def _reshaped(x, shape: tuple):
    """``np.reshape(x, shape)``; an array's own method where ``x`` is one (0.1 us against 0.6)."""
    return x.reshape(shape) if x.__class__ is np.ndarray else np.reshape(x, shape)


@kernel_for(ops.ExpandOp)
def _expand(op: ops.ExpandOp) -> Kernel:
    sizes = _sizes(op.shape)
    return lambda inputs, env, point: (np.broadcast_to(inputs[0], sizes(env)),)


@kernel_for(ops.SpatialIndexOp)
def _spatial_index(op: ops.SpatialIndexOp) -> Kernel:
    index = compile_expr(seq(*op.items))
    return lambda inputs, env, point: (inputs[0][index(env)],)


@kernel_for(ops.PadOp)
def _pad(op: ops.PadOp) -> Kernel:
    before, after = compile_expr(op.before), compile_expr(op.after)

    def run(inputs, env, point):
        x = inputs[0]
        widths = [(0, 0)] * x.ndim
        widths[op.axis % x.ndim] = (int(before(env)), int(after(env)))
        return (np.pad(x, widths),)

    return run


@kernel_for(ops.UDFOp)
def _udf(op: ops.UDFOp) -> Kernel:
    def run(inputs, env, point):
        out = op.fn(*inputs)
        if out.__class__ is tuple:  # the common case: the function's own tuple, as it is
            return out
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return run


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``; a stack of matrices times one matrix is one 2-D product, and stacks whose
    matrices on one side have at most :data:`FEW` rows (or columns) against large ones on the
    other are matrix-vector products (:func:`_by_rows`).

    NumPy multiplies a stack by a matrix one small product at a time: a
    (512, 250, 64) @ (64, 64) takes about 30x longer than the same numbers
    as one (128000, 64) @ (64, 64) (numpy 2.4, this 2-core machine). A few float32
    rows times a weight matrix stored as panels, and stacks with a few rows or columns
    on one side, are native kernels' (:mod:`tempo.runtime.backends.skinny_products`)
    where they are built.
    """
    if b.ndim == 3 and a.ndim > 2 and (out := skinny_products.panels(a, b)) is not None:
        return out
    if b.ndim == 2:
        if a.ndim > 2:
            return _matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
        if a.ndim == 2 and a.shape[1] == 1 and a.dtype in OUTER_DTYPES and b.dtype == a.dtype:
            return _outer(a, b)
    if a.ndim > 2 and a.shape[:-2] == b.shape[:-2] and math.prod(a.shape[:-2]) <= FEW_MATRICES:
        if (out := skinny_products.stacked(a, b)) is not None:
            return out
        if b.shape[-1] <= FEW and a.shape[-2] * a.shape[-1] >= SKINNY_FROM:
            return np.swapaxes(_by_rows(np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)), -1, -2)
        if a.shape[-2] <= FEW and b.shape[-2] * b.shape[-1] >= SKINNY_FROM:
            return _by_rows(a, b)
    return np.matmul(a, b)


OUTER_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # where the broadcast product below is NumPy's, bit for bit


def _outer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of a column and a row, bit for bit: NumPy computes each element as ``0 + a[i] * b[j]``
    in a plain loop (no BLAS for an inner size of 1), 4x slower than the broadcast product (a
    (128, 1) @ (1, 64) takes 19 us against 5 us); adding 0 turns the product's -0 into +0 as its loop does."""
    out = np.multiply(a, b)
    out += out.dtype.type(0)
    return out


FEW = 4  # rows (or columns) of a stacked product's one side that make it matrix-vector products ...
SKINNY_FROM = 1 << 15  # ... when each matrix of the other side has at least this many elements
FEW_MATRICES = 16  # ... and the stacks hold at most this many (a Python call per row: not for long stacks)


def _by_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for stacks of the same batch shape, ``a``'s matrices of a few rows: each row times
    its matrix of ``b`` as one matrix-vector product (BLAS gemv), writing its row of the result.

    OpenBLAS's matrix product copies (packs) each matrix of ``b`` before using it; a product with
    a few rows reads a large matrix once either way, so the copy is most of its cost. Attention at
    one decoding step is such a product: (3 x S) @ (S x 64) per key/value head, and its scores
    (S x 64) @ (64 x 3), run transposed (``benchmarks/decode_floor.py``, docs/llm.md)."""
    out = np.empty((*a.shape[:-1], b.shape[-1]), np.result_type(a, b))
    for batch in itertools.product(*map(range, a.shape[:-2])):
        rows, matrix, result = a[batch], b[batch], out[batch]
        for i in range(rows.shape[0]):
            np.matmul(rows[i], matrix, out=result[i])
    return out


SMALL_PERMUTE = 1 << 20  # bytes: a permutation moving the last axis of at most this many copies it


def _permute(x: np.ndarray, axes: tuple) -> np.ndarray:
    """``x`` permuted: a view, except that a small tensor whose last axis moves is copied in the
    new order (cache-resident, so nearly free), so that the reductions and products after it
    run along contiguous rows: attention's scores, computed (keys, groups) and read (groups,
    keys), are reduced 5x faster so on NumPy."""
    out = x.transpose(axes) if x.__class__ is np.ndarray else np.transpose(x, axes)   # the method: 0.1 us, not 0.3
    if axes and axes[-1] != x.ndim - 1 and x.nbytes <= SMALL_PERMUTE:
        return np.ascontiguousarray(out)
    return out


def _batch_contract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum over the batch axes of a @ b`` as one 2-D product."""
    m, n = a.shape[-2], b.shape[-1]
    rows = np.swapaxes(a, -1, -2).reshape(-1, m)  # (batch * k, m): no copy when k == 1 (a weight gradient)
    return rows.T @ b.reshape(-1, n)


def _unsqueeze(x, axis: int) -> np.ndarray:
    """``np.expand_dims(x, axis)`` as one indexing (a view), without its argument checks: 30x faster
    on the small tensors of an acting step."""
    ndim = x.ndim if x.__class__ is np.ndarray else np.ndim(x)
    if not -ndim - 1 <= axis <= ndim:
        raise np.exceptions.AxisError(axis, ndim + 1)
    return x[(slice(None),) * (axis % (ndim + 1)) + (None,)]


def _unsqueezing(axis: int) -> Callable:
    """:func:`_unsqueeze` at ``axis``, its index built once where the axis counts from the front."""
    if axis < 0:
        return functools.partial(_unsqueeze, axis=axis)
    index = (slice(None),) * axis + (None,)

    def unsqueeze(x):
        return x[index] if x.__class__ is np.ndarray and x.ndim >= axis else _unsqueeze(x, axis)

    return unsqueeze


# Ops whose kernel is one NumPy call on the inputs and the op's static fields.
SIMPLE: dict[type, Callable] = {
    ops.BatchContractOp: lambda op, xs: (ordered_batch_contract(xs[0], xs[1], op.ordered) if op.ordered
                                         else _batch_contract(xs[0], xs[1])),
    ops.CatOp: lambda op, xs: np.concatenate(xs, axis=op.axis),
    ops.IdentOp: lambda op, xs: xs[0],
    ops.ArgSortOp: lambda op, xs: np.argsort(xs[0], axis=op.axis, kind="stable"),
    ops.TakeOp: lambda op, xs: (np.take_along_axis(xs[0], along(op, xs[0], xs[1]), op.axis) if op.batch
                                else np.take(xs[0], xs[1], axis=op.axis)),
}


def _simple(op: ops.Op) -> Kernel:
    fn = SIMPLE[type(op)]
    return lambda inputs, env, point: (fn(op, inputs),)


for _op_type in SIMPLE:
    KERNELS[_op_type] = _simple

# Ops whose kernel is one function of the inputs alone, the op's fields bound: a fused island calls it directly.
CALLS: dict[type, Callable[[ops.Op], Callable]] = {
    ops.ElementwiseOp: lambda op: ELEMENTWISE[op.fn],
    ops.ReduceOp: lambda op: (functools.partial(ORDERED[op.fn], axes=op.axes, keepdims=op.keepdims)
                              if op.ordered and op.fn in ORDERED else
                              functools.partial(REDUCTIONS.get(op.fn, REDUCERS[op.fn]), axis=op.axes,
                                                keepdims=op.keepdims)),
    ops.MatMulOp: lambda op: (functools.partial(ordered_matmul, rows=op.ordered_rows, inner=op.ordered_inner)
                              if op.ordered_rows or op.ordered_inner else _matmul),
    ops.UnsqueezeOp: lambda op: _unsqueezing(op.axis),
    ops.SqueezeOp: lambda op: operator.methodcaller("squeeze", op.axis),  # np.squeeze's own call, without its wrapper
    ops.CumSumOp: lambda op: operator.methodcaller("cumsum", op.axis),
    ops.CastOp: lambda op: operator.methodcaller("astype", op.dtype, copy=False),
    ops.PermuteOp: lambda op: (operator.methodcaller("transpose", op.axes) if op.axes[-1:] == (len(op.axes) - 1,)
                               else functools.partial(_permute, axes=op.axes)),
}


# Ops whose kernel evaluates the op's shape or index at the point: where those are constants, a fused island
# calls one function of the input instead (None where they are not).
STATIC_CALLS: dict[type, Callable[[ops.Op], Callable | None]] = {
    ops.ReshapeOp: lambda op: _static(op.shape) and _reshaping(tuple(op.shape)),
    ops.ExpandOp: lambda op: _static(op.shape) and functools.partial(np.broadcast_to, shape=tuple(op.shape)),
    ops.SpatialIndexOp: lambda op: (None if seq(*op.items).free_symbols()
                                    else operator.itemgetter(compile_expr(seq(*op.items))({}))),
}


def _static(shape) -> bool:
    return all(isinstance(s, int) for s in shape)


def _reshaping(shape: tuple) -> Callable:
    """:func:`_reshaped` to ``shape``, as the array's own method where the input is an array."""
    method = operator.methodcaller("reshape", shape)
    return lambda x: method(x) if x.__class__ is np.ndarray else np.reshape(x, shape)


def _calling(op: ops.Op) -> Kernel:
    fn = CALLS[type(op)](op)
    return lambda inputs, env, point: (fn(*inputs),)


for _op_type in CALLS:
    KERNELS[_op_type] = _calling


@kernel_for(ops.FusedOp)
def _fused(op: ops.FusedOp) -> Kernel:
    """The island's steps in order, as one generated function (:mod:`.numpy_fused`)."""
    return compile_island(op, lambda step: _factory(step)(step), _call)


def _call(op: ops.Op) -> Callable | None:
    make = CALLS.get(type(op)) or STATIC_CALLS.get(type(op))
    return (make(op) or None) if make else None


def _factory(op: ops.Op) -> Callable[[ops.Op], Kernel]:
    factory = KERNELS.get(type(op))
    if factory is None:
        raise TempoError(f"the numpy backend has no kernel for {op.name}")
    return factory


class NumPyBackend(Backend):
    """NumPy on the CPU: the reference every other backend is checked against."""

    name = "numpy"
    orders_every_program = True  # the reference: every program's sums over steps in step order

    def __init__(self, device: str | None = None, row_programs: bool = False):
        """``row_programs``: a fused island's chains of float32 elementwise steps (a decoding step's
        norms, rotary embedding, SwiGLU) each run as one native call (:mod:`.numpy_rows`), the same
        numbers to float32 rounding, not bit for bit (off: every step its NumPy call)."""
        if device not in (None, "cpu"):
            raise TempoError(f"the numpy backend runs on the CPU only, not on {device!r}: "
                             f"choose torch:cuda or jax:gpu for a GPU")
        if not isinstance(row_programs, bool):
            raise TempoError(f"NumPyBackend(row_programs=...) takes True or False, got {row_programs!r}")
        self.row_programs = row_programs
        self._slabs = huge_pages.Slabs()  # stores' buffers of a few MB: on huge pages (empty_rows)

    def kernel(self, op: ops.Op) -> Kernel:
        if self.row_programs and type(op) is ops.FusedOp:
            return compile_island(op, lambda step: _factory(step)(step), _call, rows=True)
        return _factory(op)(op)

    def covers(self, op_type: type) -> bool:
        return op_type in KERNELS

    def weight_panel(self, rows: int) -> int | None:
        """OpenBLAS multiplies a few rows by a large matrix 2-4x faster panel by panel
        (``benchmarks/matmul_panels.py``: 8 -> 29 GB/s of weights read for 4 rows, with panels of
        64 columns; 32 columns for 1 and for 5 to 32 rows)."""
        return 64 if 2 <= rows <= 4 else 32

    def stack(self, tensors: list, shape: tuple, dtype: str):
        if not tensors:
            return np.zeros(shape, dtype=dtype)
        out = np.stack(tensors)
        return out.reshape(tuple(shape) + out.shape[1:])

    def cast(self, tensor, dtype: str):
        return cast(tensor, dtype)

    def broadcast(self, tensor, shape: tuple):
        return np.broadcast_to(tensor, shape)

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def empty(self, shape: tuple, dtype: str):
        return np.empty(shape, dtype=dtype)

    def empty_rows(self, rows: int, row_shape: tuple, dtype: str, axis: int = 0):
        """Rows at ``axis`` in memory: in ``buffer[a:b]`` with its first axis moved to ``axis``, the
        rows under each index of the axes before it are one contiguous run (a matrix product
        reads them without a copy). Buffers of 256 KB to 4 MB (a layer's keys or values) come from
        huge-page slabs (:mod:`.huge_pages`), as NumPy gives larger ones huge pages itself."""
        row_shape = tuple(row_shape)
        if not axis:  # rows first in memory too: the buffer as it is, without moveaxis's checks
            return self._slabs.empty((rows,) + row_shape, dtype)
        buffer = self._slabs.empty(row_shape[:axis] + (rows,) + row_shape[axis:], dtype)
        return np.moveaxis(buffer, axis, 0)

    def write_into(self, buffer, index, value):
        buffer[index] = value
        return buffer

    def view(self, buffer, index):
        return buffer[index]

    def detach(self, tensor, sources: list):
        if any(np.may_share_memory(tensor, s) for s in sources):
            return np.array(tensor)
        return tensor

    def nbytes(self, tensor) -> int:
        return np.asarray(tensor).nbytes

    def owned_nbytes(self, tensor) -> int:
        return 0 if getattr(tensor, "base", None) is not None else np.asarray(tensor).nbytes
