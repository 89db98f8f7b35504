"""Shape and dtype inference: one rule per op type, in one registry.

A rule takes the op and its input shapes and dtypes and returns the output
shapes and dtypes; a bad combination raises :class:`tempo.errors.ShapeError`.
Sizes are ints or symbolic expressions (dynamic shapes such as ``T - t``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tempo.errors import ShapeError
from tempo.ir import ops
from tempo.symbolic.expr import Expr, as_expr
from tempo.symbolic.simplify import simplify

Size = int | Expr
Rule = Callable[..., tuple[tuple, tuple]]
RULES: dict[type, Rule] = {}


def rule(op_type: type):
    def register(fn: Rule) -> Rule:
        RULES[op_type] = fn
        return fn

    return register


def infer(op: ops.Op, shapes: list[tuple], dtypes: list[str]) -> tuple[tuple, tuple]:
    """Output shapes and dtypes of ``op`` applied to inputs of these shapes and dtypes."""
    fn = RULES.get(type(op))
    if fn is None:
        raise NotImplementedError(f"no shape rule for {op.name}")
    return fn(op, shapes, dtypes)


def size(x) -> Size:
    """Canonical size: a Python int when known, else a simplified expression."""
    e = simplify(as_expr(x))
    return int(e.value) if e.is_const else e


def same_size(a: Size, b: Size) -> bool:
    return size(a) == size(b) if isinstance(size(a), int) and isinstance(size(b), int) \
        else simplify(as_expr(a)) is simplify(as_expr(b))


def fmt(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast(shapes: list[tuple]) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        chosen: Size = 1
        for s in sizes:
            if isinstance(s, int) and s == 1:
                continue
            if isinstance(chosen, int) and chosen == 1:
                chosen = s
            elif not same_size(chosen, s):
                raise ShapeError(f"shapes {', '.join(fmt(x) for x in shapes)} do not broadcast "
                                 f"(axis {axis - rank}: {chosen} vs {s})")
        out.append(size(chosen))
    return tuple(out)


def promote(dtypes: list[str]) -> str:
    return str(np.result_type(*[np.dtype(d) for d in dtypes]))


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise ShapeError(f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


@rule(ops.ConstOp)
def _const(op, shapes, dtypes):
    value = op.value.array
    return (tuple(value.shape[op.num_domain_axes:]),), (str(value.dtype),)


@rule(ops.RandomOp)
def _random(op, shapes, dtypes):
    return (tuple(size(s) for s in op.shape),), (op.dtype,)


@rule(ops.EvalSymbolOp)
def _eval_symbol(op, shapes, dtypes):
    return ((),), ("int64",)


_BOOL_RESULT = ops.COMPARISONS
_FLOAT_RESULT = ("div", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid")


@rule(ops.ElementwiseOp)
def _elementwise(op, shapes, dtypes):
    if op.fn == "where":
        if dtypes[0] != "bool":
            raise ShapeError(f"where needs a bool condition, got {dtypes[0]}")
        return (broadcast(shapes),), (promote(dtypes[1:]),)
    out = broadcast(shapes)
    if op.fn in _BOOL_RESULT:
        return (out,), ("bool",)
    dtype = promote(dtypes)
    if op.fn in _FLOAT_RESULT and not np.issubdtype(np.dtype(dtype), np.floating):
        dtype = "float32"
    return (out,), (dtype,)


@rule(ops.ReduceOp)
def _reduce(op, shapes, dtypes):
    (shape,) = shapes
    axes = {normalize_axis(a, len(shape)) for a in op.axes}
    out = tuple((1 if op.keepdims else None) if i in axes else s for i, s in enumerate(shape))
    dtype = dtypes[0]
    if op.fn == "mean" and not np.issubdtype(np.dtype(dtype), np.floating):
        dtype = "float32"
    if op.fn == "sum" and dtype == "bool":
        dtype = "int64"
    return (tuple(s for s in out if s is not None),), (dtype,)


@rule(ops.CumSumOp)
def _cumsum(op, shapes, dtypes):
    normalize_axis(op.axis, len(shapes[0]))
    return (shapes[0],), (dtypes[0],)


@rule(ops.ScanOp)
def _scan(op, shapes, dtypes):
    normalize_axis(op.axis, len(shapes[0]))
    dtype = dtypes[0] if np.issubdtype(np.dtype(dtypes[0]), np.floating) else "float32"
    return (shapes[0],), (dtype if op.gamma != 1.0 else ("int64" if dtypes[0] == "bool" else dtypes[0]),)


@rule(ops.LinearScanOp)
def _linear_scan(op, shapes, dtypes):
    x, a = shapes
    normalize_axis(op.axis, len(x))
    if len(x) != len(a) or not all(same_size(p, q) for p, q in zip(x, a)):
        raise ShapeError(f"a linear scan needs x and a of one shape, got {fmt(x)} and {fmt(a)}")
    return (x,), (dtypes[0],)


@rule(ops.DiscountedSumOp)
def _discounted_sum(op, shapes, dtypes):
    (shape,) = shapes
    axis = normalize_axis(op.axis, len(shape))
    dtype = dtypes[0] if np.issubdtype(np.dtype(dtypes[0]), np.floating) else "float32"
    return (shape[:axis] + shape[axis + 1:],), (dtype,)


@rule(ops.BatchContractOp)
def _batch_contract(op, shapes, dtypes):
    a, b = shapes
    if len(a) != len(b) or len(a) < 3 or not all(same_size(x, y) for x, y in zip(a[:-2], b[:-2])) \
            or not same_size(a[-1], b[-2]):
        raise ShapeError(f"batch contraction needs (*batch, m, k) and (*batch, k, n), got {fmt(a)} and {fmt(b)}")
    return ((a[-2], b[-1]),), (dtypes[0],)


@rule(ops.MatMulOp)
def _matmul(op, shapes, dtypes):
    a, b = shapes
    if not a or not b:
        raise ShapeError("matmul needs tensors of rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if not same_size(a2[-1], b2[-2]):
        raise ShapeError(f"matmul of shapes {fmt(a)} and {fmt(b)}: inner sizes {a2[-1]} and {b2[-2]} differ")
    batch = broadcast([a2[:-2], b2[:-2]])
    out = batch + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return (out,), (promote(dtypes),)


def _numel(shape) -> Size:
    total: Expr | int = 1
    for s in shape:
        total = total * s
    return size(total)


@rule(ops.ReshapeOp)
def _reshape(op, shapes, dtypes):
    (shape,) = shapes
    new = list(op.shape)
    if sum(1 for s in new if isinstance(s, int) and s == -1) > 1:
        raise ShapeError("reshape takes at most one -1")
    if any(isinstance(s, int) and s == -1 for s in new):
        known = _numel([s for s in new if not (isinstance(s, int) and s == -1)])
        total = _numel(shape)
        inferred = total // known if isinstance(total, int) and isinstance(known, int) else size(as_expr(total) // known)
        new = [inferred if isinstance(s, int) and s == -1 else s for s in new]
    if not same_size(_numel(shape), _numel(new)):
        raise ShapeError(f"cannot reshape {fmt(shape)} ({_numel(shape)} elements) into "
                         f"{fmt(tuple(new))} ({_numel(new)} elements)")
    return (tuple(size(s) for s in new),), (dtypes[0],)


@rule(ops.PermuteOp)
def _permute(op, shapes, dtypes):
    (shape,) = shapes
    if sorted(op.axes) != list(range(len(shape))):
        raise ShapeError(f"permute axes {op.axes} are not a permutation of {len(shape)} axes")
    return (tuple(shape[a] for a in op.axes),), (dtypes[0],)


@rule(ops.ExpandOp)
def _expand(op, shapes, dtypes):
    (shape,) = shapes
    if len(op.shape) < len(shape):
        raise ShapeError(f"cannot expand {fmt(shape)} to fewer axes {fmt(op.shape)}")
    padded = (1,) * (len(op.shape) - len(shape)) + tuple(shape)
    for old, new in zip(padded, op.shape):
        if not (isinstance(old, int) and old == 1) and not same_size(old, new):
            raise ShapeError(f"cannot expand {fmt(shape)} to {fmt(op.shape)}")
    return (tuple(size(s) for s in op.shape),), (dtypes[0],)


@rule(ops.SqueezeOp)
def _squeeze(op, shapes, dtypes):
    (shape,) = shapes
    axis = normalize_axis(op.axis, len(shape))
    if not (isinstance(shape[axis], int) and shape[axis] == 1):
        raise ShapeError(f"cannot squeeze axis {op.axis} of size {shape[axis]}")
    return (shape[:axis] + shape[axis + 1:],), (dtypes[0],)


@rule(ops.UnsqueezeOp)
def _unsqueeze(op, shapes, dtypes):
    (shape,) = shapes
    axis = normalize_axis(op.axis, len(shape) + 1)
    return (shape[:axis] + (1,) + shape[axis:],), (dtypes[0],)


@rule(ops.CatOp)
def _cat(op, shapes, dtypes):
    rank = len(shapes[0])
    axis = normalize_axis(op.axis, rank)
    for s in shapes[1:]:
        if len(s) != rank or any(not same_size(a, b) for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ShapeError(f"cat along axis {op.axis} of shapes {', '.join(fmt(x) for x in shapes)}")
    total: Expr | int = 0
    for s in shapes:
        total = total + s[axis]
    out = shapes[0][:axis] + (size(total),) + shapes[0][axis + 1:]
    return (out,), (promote(dtypes),)


@rule(ops.AttentionOp)
def _attention(op, shapes, dtypes):
    q, k, v = shapes
    if len(q) < 2 or len(k) < 2 or len(v) < 2 or not same_size(q[-1], k[-1]) or not same_size(k[-2], v[-2]):
        raise ShapeError(f"attention needs queries (..., R, d), keys (..., S, d) and values (..., S, e), "
                         f"got {fmt(q)}, {fmt(k)} and {fmt(v)}")
    return (broadcast([q[:-2], k[:-2], v[:-2]]) + (q[-2], v[-1]),), (promote(dtypes),)


@rule(ops.ArgSortOp)
def _argsort(op, shapes, dtypes):
    (shape,) = shapes
    normalize_axis(op.axis, len(shape))
    return (shape,), ("int64",)


@rule(ops.TakeOp)
def _take(op, shapes, dtypes):
    x, index = shapes
    axis, batch = normalize_axis(op.axis, len(x)), op.batch
    if len(index) != batch + 1 or np.dtype(dtypes[1]).kind not in "iu":
        raise ShapeError(f"take's indices are one int axis, got {fmt(index)} of {dtypes[1]}")
    if axis < batch or any(not same_size(a, b) for a, b in zip(x[:batch], index[:batch])):
        raise ShapeError(f"take along axis {axis} of {fmt(x)} with indices {fmt(index)} over {batch} batch axes")
    return (x[:axis] + index[batch:] + x[axis + 1:],), (dtypes[0],)


@rule(ops.PadOp)
def _pad(op, shapes, dtypes):
    (shape,) = shapes
    axis = normalize_axis(op.axis, len(shape))
    padded = size(as_expr(shape[axis]) + op.before + op.after)
    return (tuple(shape[:axis]) + (padded,) + tuple(shape[axis + 1:]),), (dtypes[0],)


@rule(ops.SpatialIndexOp)
def _spatial_index(op, shapes, dtypes):
    (shape,) = shapes
    if len(op.items) > len(shape):
        raise ShapeError(f"{len(op.items)} spatial indices for a tensor of rank {len(shape)}")
    out = []
    for item, dim in zip(op.items, shape):
        if item.op == "slice":
            out.append(size(item.args[1] - item.args[0]))
        elif isinstance(dim, int) and item.is_const and not -dim <= item.value < dim:
            raise ShapeError(f"spatial index {item.value} is out of range for an axis of size {dim}")
    return (tuple(out) + tuple(shape[len(op.items):]),), (dtypes[0],)


@rule(ops.CastOp)
def _cast(op, shapes, dtypes):
    return (shapes[0],), (str(np.dtype(op.dtype)),)


@rule(ops.IdentOp)
def _ident(op, shapes, dtypes):
    return (shapes[0],), (dtypes[0],)


@rule(ops.MergeOp)
def _merge(op, shapes, dtypes):
    return (shapes[0],), (dtypes[0],)


@rule(ops.UDFOp)
def _udf(op, shapes, dtypes):
    return tuple(tuple(size(s) for s in shape) for shape in op.out_shapes), tuple(op.out_dtypes)

