"""Constructors and tensor math on recurrent tensors.

Every function here builds SDG nodes through :func:`tempo.api.rt.apply`;
the same functions are installed as RT methods and operators at the bottom.
"""
from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from tempo.api.context import current
from tempo.api.rt import RecurrentTensor, apply, lift, materialize
from tempo.errors import DomainError, ShapeError, TempoError, user_site
from tempo.ir import ops
from tempo.ir.dtypes import dtype_name
from tempo.symbolic.expr import Expr, as_expr, max_, min_

RT = RecurrentTensor


# ----- constructors -----
def _read_only(array: np.ndarray) -> bool:
    """Neither the array nor any array it views can be written through (a read-only view of a writable
    array is not: its owner may still write it)."""
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return False
        array = array.base
    return True


def from_numpy(array, dims: Sequence[Expr] = ()) -> RT:
    """A constant RT; the array's leading axes are bound to ``dims``: ``r[t] = array[t]``. The
    program holds a copy of the array, or, where it is read-only and in C order, the array itself
    (neither it nor an array it views is writable: e.g. a model's weights, held once)."""
    ctx, site = current(), user_site()
    array = np.asarray(array)
    dims = tuple(dims)
    if any(not (isinstance(d, Expr) and d.is_symbol and d.kind == "step") for d in dims):
        raise DomainError("from_numpy dims must be step symbols from ctx.dims(...)", site)
    if len(set(dims)) != len(dims):
        raise DomainError("from_numpy dims repeat a dimension", site)
    if array.ndim < len(dims):
        raise ShapeError(f"from_numpy: an array of rank {array.ndim} cannot bind {len(dims)} dims "
                         f"({', '.join(d.name for d in dims)})", site)
    domain = ctx.order(dims)
    array = np.transpose(array, [dims.index(d) for d in domain] + list(range(len(dims), array.ndim)))
    if not (_read_only(array) and array.flags.c_contiguous):
        array = np.array(array, order="C")
    op = ops.ConstOp(ops.Array(array), len(dims))
    node = ctx.sdg.add_node(op, domain, (tuple(array.shape[len(dims):]),), (str(array.dtype),), site)
    return RT(ctx, node)


def full(shape, value, dtype: str = "float32") -> RT:
    """A constant tensor of ``shape`` filled with ``value`` (sizes may be symbolic)."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    scalar = lift(np.asarray(value, dtype=dtype_name(dtype, user_site())))
    if all(isinstance(s, (int, np.integer)) for s in shape):
        return scalar.expand(*shape) if shape else scalar
    return apply(ops.ExpandOp(tuple(shape)), [scalar], site=user_site())


def zeros(shape, dtype: str = "float32") -> RT:
    return full(shape, 0, dtype)


def ones(shape, dtype: str = "float32") -> RT:
    return full(shape, 1, dtype)


def placeholder(shape=(), dtype: str = "float32", dims: Sequence[Expr] = ()) -> RT:
    """A branching RT, defined piecewise afterwards: ``s[0] = ...; s[t + 1] = ...``."""
    ctx, site = current(), user_site()
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    node = ctx.sdg.add_node(ops.MergeOp(placeholder=True), ctx.order(dims), (shape,),
                            (dtype_name(dtype, site),), site)
    return RT(ctx, node)


def eval_symbol(expr) -> RT:
    """An int64 RT holding the runtime value of ``expr`` (e.g. the step ``t``)."""
    expr = as_expr(expr)
    if expr.is_boolean:
        raise TempoError(f"eval_symbol takes an integer expression, not the condition {expr}", user_site())
    return apply(ops.EvalSymbolOp(expr), [], site=user_site(), ctx=current())


def udf(fn, inputs: Sequence[RT], out_shapes, out_dtypes, label: str = "udf",
        batched: bool = False):
    """Run ``fn(*numpy_arrays) -> tuple of arrays`` at each point of the inputs' domain.

    With ``batched=True``, ``fn`` promises to accept a leading batch axis on
    every input and return one on every output, so a vectorized dim calls it
    once for all of its points.
    """
    site = user_site()
    dtypes = tuple(dtype_name(d, site) for d in out_dtypes)
    op = ops.UDFOp(fn, tuple(tuple(s) for s in out_shapes), dtypes, label, batched)
    return apply(op, list(inputs), site=site)


# ----- elementwise -----
def _dtype_of(x) -> str | None:
    return x.dtype if isinstance(x, RT) else None


def elementwise(fn: str, *args) -> RT:
    hint = next((_dtype_of(a) for a in args if isinstance(a, RT)), None)
    rts = [lift(a, hint) for a in args]
    return apply(ops.ElementwiseOp(fn), rts, site=user_site())


def where(cond, a, b) -> RT:
    """Elementwise ``a`` where ``cond`` holds, else ``b``."""
    hint = _dtype_of(a) or _dtype_of(b)
    return apply(ops.ElementwiseOp("where"), [lift(cond), lift(a, hint), lift(b, hint)], site=user_site())


def _extremum(kind: str, symbolic, plain):
    def pick(a, b):
        if isinstance(a, RT) or isinstance(b, RT):
            return elementwise(kind, a, b)
        if isinstance(a, Expr) or isinstance(b, Expr):
            return symbolic(a, b)
        return plain(a, b)

    pick.__name__ = kind
    pick.__doc__ = (f"``tpo.{kind[:3]}``: elementwise {kind} on RTs, symbolic on expressions "
                    f"(``t:tpo.min(t + 3, T)``), plain on numbers.")
    return pick


minimum = _extremum("minimum", min_, builtins.min)
maximum = _extremum("maximum", max_, builtins.max)


def _unary(fn: str):
    def op(x) -> RT:
        return apply(ops.ElementwiseOp(fn), [lift(x)], site=user_site())

    op.__name__ = fn
    op.__doc__ = f"Elementwise {fn}."
    return op


exp, log, sqrt, abs, sin, cos, tanh, sigmoid, relu = (
    _unary(n) for n in ("exp", "log", "sqrt", "abs", "sin", "cos", "tanh", "sigmoid", "relu"))


# ----- reductions and scans -----
def _axes(x: RT, axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(len(x.shape)))
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def _reducer(fn: str):
    def op(x: RT, axis=None, keepdims: bool = False) -> RT:
        return apply(ops.ReduceOp(fn, _axes(x, axis), keepdims), [x], site=user_site())

    op.__name__ = fn
    op.__doc__ = f"{fn} over ``axis`` (all axes when None)."
    return op


sum, mean, max, min = (_reducer(n) for n in ("sum", "mean", "max", "min"))


def cumsum(x: RT, axis: int = 0) -> RT:
    return apply(ops.CumSumOp(axis), [x], site=user_site())


def discounted_sum(x: RT, gamma: float, axis: int = 0) -> RT:
    """``sum_k gamma**k * x[k]`` along ``axis``: discounted returns of ``r[t:T]``."""
    return apply(ops.DiscountedSumOp(float(gamma), axis), [x], site=user_site())


# ----- shapes -----
def matmul(a, b) -> RT:
    return apply(ops.MatMulOp(), [lift(a), lift(b)], site=user_site())


def attention(q: RT, k: RT, v: RT, scale: float, rows: int = 0, cols: int = 0, window: int = 0,
              last: bool = False) -> RT:
    """``softmax(scale * q @ k^T) @ v`` for queries ``q`` (..., R, d) at positions ``rows``,
    ``rows + 1``, ... over keys ``k`` (..., S, d) and values ``v`` (..., S, e) at positions
    ``cols``, ``cols + 1``, ..., each query seeing the keys at or before its position (and
    within the last ``window`` positions when ``window`` > 0): one op
    (:class:`tempo.ir.ops.AttentionOp`), whose scores no other op reads. With ``last``, the
    queries are at the keys' last ``R`` positions (``rows`` is ignored), ``S`` may change from
    point to point."""
    return apply(ops.AttentionOp(float(scale), int(rows), int(cols), int(window), bool(last)),
                 [lift(q), lift(k), lift(v)], site=user_site())


def _shape_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(s if isinstance(s, Expr) else int(s) for s in shape)


def reshape(x: RT, *shape) -> RT:
    return apply(ops.ReshapeOp(_shape_args(shape)), [x], site=user_site())


def permute(x: RT, *axes) -> RT:
    return apply(ops.PermuteOp(_shape_args(axes)), [x], site=user_site())


def expand(x: RT, *shape) -> RT:
    return apply(ops.ExpandOp(_shape_args(shape)), [x], site=user_site())


def squeeze(x: RT, axis: int = 0) -> RT:
    return apply(ops.SqueezeOp(axis), [x], site=user_site())


def unsqueeze(x: RT, axis: int = 0) -> RT:
    return apply(ops.UnsqueezeOp(axis), [x], site=user_site())


def cat(xs: Sequence[RT], axis: int = 0) -> RT:
    if not xs:
        raise ShapeError("cat of no tensors", user_site())
    return apply(ops.CatOp(axis), [lift(x) for x in xs], site=user_site())


def argsort(x: RT, axis: int = -1) -> RT:
    """int64 indices that sort ``x`` along ``axis``; equal values keep their order (a stable sort)."""
    return apply(ops.ArgSortOp(axis), [x], site=user_site())


def take(x: RT, index: RT, axis: int = 0) -> RT:
    """``x``'s entries at ``index`` (a 1-D int RT) along ``axis``, in that order: NumPy's ``take``."""
    return apply(ops.TakeOp(axis), [x, index], site=user_site())


def cast(x: RT, dtype: str) -> RT:
    """``x`` as ``dtype``; ``x`` itself where it already has that dtype (no op in the graph:
    autodiff casts every gradient to its primal's dtype, which is nearly always the same)."""
    dtype = dtype_name(dtype, user_site())
    return x if x.dtype == dtype else apply(ops.CastOp(dtype), [x], site=user_site())


def ident(x: RT) -> RT:
    """``x`` materialised as its own tensor."""
    return materialize(x, user_site())


def stop_gradient(x: RT) -> RT:
    """``x`` as a constant for autodiff (targets, baselines)."""
    return apply(ops.IdentOp(stop_gradient=True), [x], site=user_site())


# ----- methods and operators on RecurrentTensor -----
def _binary(fn: str, swap: bool = False):
    def op(self, other):
        return elementwise(fn, other, self) if swap else elementwise(fn, self, other)

    return op


_METHODS = {
    "__add__": _binary("add"), "__radd__": _binary("add", True),
    "__sub__": _binary("sub"), "__rsub__": _binary("sub", True),
    "__mul__": _binary("mul"), "__rmul__": _binary("mul", True),
    "__truediv__": _binary("div"), "__rtruediv__": _binary("div", True),
    "__pow__": _binary("pow"), "__rpow__": _binary("pow", True),
    "__mod__": _binary("mod"), "__floordiv__": _binary("floordiv"),
    "__lt__": _binary("lt"), "__le__": _binary("le"), "__gt__": _binary("gt"), "__ge__": _binary("ge"),
    "__eq__": _binary("eq"), "__ne__": _binary("ne"),
    "__and__": _binary("and"), "__or__": _binary("or"),
    "__invert__": _unary("not"), "__neg__": _unary("neg"),
    "__matmul__": matmul, "__rmatmul__": lambda self, other: matmul(other, self),
    "exp": exp, "log": log, "sqrt": sqrt, "abs": abs, "sin": sin, "cos": cos, "tanh": tanh,
    "sigmoid": sigmoid, "relu": relu,
    "sum": sum, "mean": mean, "max": max, "min": min, "cumsum": cumsum, "discounted_sum": discounted_sum,
    "matmul": matmul, "reshape": reshape, "permute": permute, "expand": expand, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "cast": cast, "ident": ident, "detach": stop_gradient,
}
def _backward(self) -> None:
    """Add gradient RTs for every floating-point RT this loss depends on (``x.grad``)."""
    from tempo.api.autodiff import backward

    backward(self)


def _grad(self) -> RT:
    """The gradient of the loss with respect to this RT (after ``loss.backward()``)."""
    from tempo.api.autodiff import grad_of

    return grad_of(self)


_METHODS["backward"] = _backward
RecurrentTensor.grad = property(_grad)
for _name, _fn in _METHODS.items():
    setattr(RecurrentTensor, _name, _fn)
RecurrentTensor.__hash__ = object.__hash__  # __eq__ is elementwise
