"""Vector-Jacobian products: one rule per op type, written with recurrent tensors.

A rule gets a :class:`VJPCall` (the node, its inputs as the node reads them,
its outputs and their gradients) and returns one gradient per input, shaped
like that input *as read* (a slice read ``x[t:T]`` has a leading ``T - t``
axis), or ``None`` where no gradient flows. Temporal accumulation over the
dependence expressions is :mod:`tempo.api.autodiff`'s job, not the rules'.
A missing rule is an error naming the op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tempo.api import functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.api.rt import apply, materialize
from tempo.errors import TempoError, user_site
from tempo.ir import ops
from tempo.ir.ends import outer_dims
from tempo.ir.sdg import Edge, Node, identity_index
from tempo.ir.shapes import same_size
from tempo.symbolic.expr import Expr, as_expr, bound_of, logical_and, make_slice
from tempo.symbolic.simplify import simplify


@dataclass
class VJPCall:
    node: Node
    edges: list[Edge]
    inputs: list[RT]
    outputs: list[RT]
    grads: list[RT | None]

    @property
    def g(self) -> RT:
        return self.grads[0]


Rule = Callable[[VJPCall], list]
VJP: dict[type, Rule] = {}


def vjp_rule(*op_types: type):
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            VJP[op_type] = fn
        return fn

    return register


def is_float(dtype: str) -> bool:
    return np.dtype(dtype).kind == "f"


def _ok(x: RT, grad: RT) -> RT | None:
    return unbroadcast(grad, x.shape).cast(x.dtype) if is_float(x.dtype) else None


def unbroadcast(grad: RT, shape: tuple) -> RT:
    """Sum ``grad`` over the axes that broadcasting added or stretched from size 1."""
    extra = len(grad.shape) - len(shape)
    if extra > 0:
        grad = F.sum(grad, axis=tuple(range(extra)))
    stretched = tuple(a for a, (s, g) in enumerate(zip(shape, grad.shape))
                      if isinstance(s, int) and s == 1 and not same_size(g, 1))
    return F.sum(grad, axis=stretched, keepdims=True) if stretched else grad


# ----- leaves and stop-gradients -----
@vjp_rule(ops.ConstOp, ops.EvalSymbolOp, ops.RandomOp)
def _leaf(call: VJPCall) -> list:
    return []


@vjp_rule(ops.UDFOp)
def _udf(call: VJPCall) -> list:
    """UDFs are opaque host code: no gradient flows into their inputs."""
    return [None] * len(call.inputs)


# ----- elementwise -----
def _derivative(fn: str, x: RT, y: RT) -> RT | None:
    derivatives = {
        "neg": lambda: F.full((), -1.0, x.dtype), "exp": lambda: y, "log": lambda: 1.0 / x,
        "sqrt": lambda: 0.5 / y, "abs": lambda: F.where(x >= 0, 1.0, -1.0), "sin": lambda: F.cos(x),
        "cos": lambda: -F.sin(x), "tanh": lambda: 1.0 - y * y, "sigmoid": lambda: y * (1.0 - y),
        "relu": lambda: F.where(x > 0, 1.0, 0.0),
    }
    return derivatives[fn]() if fn in derivatives else None


def _binary_grads(fn: str, a: RT, b: RT, y: RT, g: RT) -> tuple:
    zero = F.full((), 0.0, g.dtype)
    rules = {
        "add": lambda: (g, g), "sub": lambda: (g, -g), "mul": lambda: (g * b, g * a),
        "div": lambda: (g / b, -g * y / b),
        "pow": lambda: (g * b * a ** (b - 1.0), g * y * F.log(F.where(a > 0, a, 1.0))),
        "maximum": lambda: (F.where(a >= b, g, zero), F.where(a >= b, zero, g)),
        "minimum": lambda: (F.where(a <= b, g, zero), F.where(a <= b, zero, g)),
        "mod": lambda: (g, -g * F.elementwise("floordiv", a, b)),
    }
    return rules[fn]() if fn in rules else (None, None)


@vjp_rule(ops.ElementwiseOp)
def _elementwise(call: VJPCall) -> list:
    fn, xs, y, g = call.node.op.fn, call.inputs, call.outputs[0], call.g
    if not is_float(y.dtype):
        return [None] * len(xs)
    if fn == "where":
        zero = F.full((), 0.0, g.dtype)
        return [None, _ok(xs[1], F.where(xs[0], g, zero)), _ok(xs[2], F.where(xs[0], zero, g))]
    if len(xs) == 1:
        d = _derivative(fn, xs[0], y)
        return [None if d is None else _ok(xs[0], g * d)]
    ga, gb = _binary_grads(fn, xs[0], xs[1], y, g)
    return [None if ga is None else _ok(xs[0], ga), None if gb is None else _ok(xs[1], gb)]


# ----- reductions and scans -----
def _restore_axes(g: RT, op: ops.ReduceOp, shape: tuple) -> RT:
    """``g`` with the reduced axes put back (size 1), then expanded to ``shape``."""
    rank = len(shape)
    if not op.keepdims:
        for axis in sorted(a % rank for a in op.axes):
            g = F.unsqueeze(g, axis)
    return F.expand(g, *shape) if shape else g


@vjp_rule(ops.ReduceOp)
def _reduce(call: VJPCall) -> list:
    op, (x,), y, g = call.node.op, call.inputs, call.outputs[0], call.g
    if not is_float(x.dtype):
        return [None]
    spread = _restore_axes(g, op, x.shape)
    if op.fn == "sum":
        return [spread]
    count = _count(g, x.shape, op.axes)
    if op.fn == "mean":
        return [spread / count.cast(g.dtype)]
    hit = (x == _restore_axes(y, op, x.shape)).cast(g.dtype)
    ties = _restore_axes(F.sum(hit, axis=op.axes, keepdims=op.keepdims), op, x.shape)
    return [spread * hit / ties]


def _count(g: RT, shape: tuple, axes: tuple[int, ...]) -> RT:
    """The elements along ``axes`` of ``shape``, at each point of ``g``'s domain: where a size is
    the bound ``T`` of a dim that ends at run time, its value over the outer dims ``i`` of ``g`` is ``T[i]``."""
    total = as_expr(1)
    for a in axes:
        total = total * as_expr(shape[a % len(shape)])
    if total.is_const:
        return F.full((), total.value, "int64")
    bounds = total.free_symbols()
    outer = {d for t, dims in outer_dims(g.ctx.sdg).items() if bound_of(t) in bounds for d in dims}
    return apply(ops.EvalSymbolOp(total), [], ctx=g.ctx, over=[d for d in g.domain if d in outer])


@vjp_rule(ops.CumSumOp)
def _cumsum(call: VJPCall) -> list:
    """The reverse cumulative sum: ``sum(g) - cumsum(g) + g``."""
    op, g = call.node.op, call.g
    total = F.sum(g, axis=op.axis, keepdims=True)
    return [total - F.cumsum(g, op.axis) + g]


@vjp_rule(ops.DiscountedSumOp)
def _discounted_sum(call: VJPCall) -> list:
    op, (x,), g = call.node.op, call.inputs, call.g
    axis = op.axis % len(x.shape)
    k = F.cumsum(F.ones((x.shape[axis],), x.dtype)) - 1.0
    weights = F.full((), op.gamma, x.dtype) ** k
    for _ in range(len(x.shape) - axis - 1):
        weights = F.unsqueeze(weights, -1)
    return [F.unsqueeze(g, axis) * weights]


# ----- linear algebra and shapes -----
def _swap_last(x: RT) -> RT:
    axes = list(range(len(x.shape)))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return F.permute(x, *axes)


@vjp_rule(ops.MatMulOp)
def _matmul(call: VJPCall) -> list:
    (a, b), g = call.inputs, call.g
    a_vector, b_vector = len(a.shape) == 1, len(b.shape) == 1
    a2 = F.unsqueeze(a, 0) if a_vector else a
    b2 = F.unsqueeze(b, -1) if b_vector else b
    g2 = F.unsqueeze(g, len(g.shape) - (0 if b_vector else 1)) if a_vector else g
    g2 = F.unsqueeze(g2, len(g2.shape)) if b_vector else g2
    ga, gb = F.matmul(g2, _swap_last(b2)), F.matmul(_swap_last(a2), g2)
    ga = F.squeeze(ga, -2) if a_vector else ga
    gb = F.squeeze(gb, -1) if b_vector else gb
    return [_ok(a, ga), _ok(b, gb)]


@vjp_rule(ops.AttentionOp)
def _attention(call: VJPCall) -> list:
    """With the weights ``p = softmax(scale * q @ k^T, masked)`` computed again and ``out = p @ v``:
    ``dv = p^T g``, ``ds = p * (g @ v^T - sum(g * out))``, ``dq = scale * ds @ k``,
    ``dk = scale * ds^T @ q``."""
    (q, k, v), g, op, out = call.inputs, call.g, call.node.op, call.outputs[0]
    queries, keys = q.shape[-2], k.shape[-2]
    if not isinstance(queries, int) or not isinstance(keys, int):
        raise TempoError(f"the gradient of attention needs static query and key counts, not {queries} and {keys}",
                         call.node.site)
    scores = F.matmul(q, _swap_last(k)) * op.scale
    scores = F.where(F.from_numpy(op.visible(queries, keys)), scores, F.full((), -np.inf, scores.dtype))
    weights = F.exp(scores - F.max(scores, axis=-1, keepdims=True))
    weights = weights / F.sum(weights, axis=-1, keepdims=True)
    ds = weights * (F.matmul(g, _swap_last(v)) - F.sum(g * out, axis=-1, keepdims=True))
    return [_ok(q, F.matmul(ds, k) * op.scale), _ok(k, F.matmul(_swap_last(ds), q) * op.scale),
            _ok(v, F.matmul(_swap_last(weights), g))]


@vjp_rule(ops.ReshapeOp)
def _reshape(call: VJPCall) -> list:
    return [F.reshape(call.g, *call.inputs[0].shape)]


@vjp_rule(ops.PermuteOp)
def _permute(call: VJPCall) -> list:
    axes = call.node.op.axes
    return [F.permute(call.g, *np.argsort(axes).tolist())]


@vjp_rule(ops.ExpandOp)
def _expand(call: VJPCall) -> list:
    return [unbroadcast(call.g, call.inputs[0].shape)]


@vjp_rule(ops.SqueezeOp)
def _squeeze(call: VJPCall) -> list:
    return [F.unsqueeze(call.g, call.node.op.axis)]


@vjp_rule(ops.UnsqueezeOp)
def _unsqueeze(call: VJPCall) -> list:
    return [F.squeeze(call.g, call.node.op.axis)]


@vjp_rule(ops.CatOp)
def _cat(call: VJPCall) -> list:
    axis = call.node.op.axis % len(call.g.shape)
    out, start = [], as_expr(0)
    for x in call.inputs:
        stop = start + as_expr(x.shape[axis])
        items = (make_slice(0, s) for s in call.g.shape[:axis])
        out.append(_ok(x, apply(ops.SpatialIndexOp((*items, make_slice(start, stop))), [call.g])))
        start = stop
    return out


def pad(x: RT, axis: int, before, after) -> RT:
    """``x`` with ``before`` zeros in front of and ``after`` zeros behind ``axis``."""
    return apply(ops.PadOp(axis, as_expr(before), as_expr(after)), [x])


@vjp_rule(ops.SpatialIndexOp)
def _spatial_index(call: VJPCall) -> list:
    """Scatter back: re-insert indexed axes, then zero-pad every indexed axis to its size."""
    items, (x,), g = call.node.op.items, call.inputs, call.g
    for axis, item in enumerate(items):
        if item.op != "slice":
            g = F.unsqueeze(g, axis)
    for axis, (item, dim) in enumerate(zip(items, x.shape)):
        start, stop = (item.args if item.op == "slice" else (item, item + 1))
        g = pad(g, axis, start, as_expr(dim) - stop)
    return [g]


@vjp_rule(ops.ArgSortOp)
def _argsort(call: VJPCall) -> list:
    """Indices are piecewise constant in ``x``: no gradient."""
    return [None]


@vjp_rule(ops.TakeOp)
def _take(call: VJPCall) -> list:
    """Scatter-add back: ``g`` along ``axis`` times the one-hot ``(len(index), size)`` of the indices,
    so a row taken twice gets both gradients."""
    (x, index), g, op = call.inputs, call.g, call.node.op
    if op.batch:
        raise TempoError(f"no gradient rule for {op.name} over batch axes", call.node.site)
    axis, rank = op.axis % len(x.shape), len(x.shape)
    size = x.shape[axis]
    if not isinstance(size, int):
        raise TempoError(f"the gradient of take needs a static size along axis {axis}, got {size}",
                         call.node.site)
    one_hot = (F.unsqueeze(index, 1) == F.from_numpy(np.arange(size, dtype=np.int64))).cast(g.dtype)
    last = [a for a in range(rank) if a != axis] + [axis]
    grad = F.matmul(F.permute(g, *last) if axis != rank - 1 else g, one_hot)
    return [_ok(x, F.permute(grad, *np.argsort(last).tolist()) if axis != rank - 1 else grad), None]


@vjp_rule(ops.PadOp)
def _pad(call: VJPCall) -> list:
    op, (x,), g = call.node.op, call.inputs, call.g
    axis = op.axis % len(x.shape)
    items = tuple(make_slice(0, s) for s in g.shape[:axis]) + (make_slice(op.before, op.before + x.shape[axis]),)
    return [apply(ops.SpatialIndexOp(items), [g])]


@vjp_rule(ops.CastOp)
def _cast(call: VJPCall) -> list:
    x = call.inputs[0]
    return [call.g.cast(x.dtype) if is_float(x.dtype) and is_float(call.g.dtype) else None]


@vjp_rule(ops.IdentOp)
def _ident(call: VJPCall) -> list:
    return [None if call.node.op.stop_gradient else call.g]


@vjp_rule(ops.MergeOp)
def _merge(call: VJPCall) -> list:
    """The gradient flows only into the branch that was taken at each point (TEMPO §3)."""
    return [masked_branch(call, k) for k in range(len(call.inputs))]


def masked_branch(call: VJPCall, k: int) -> RT | None:
    """The output gradient where branch ``k`` of a MergeOp was the one taken, else zero."""
    taken = [e.cond if e.cond is not None else Expr("const", (True,)) for e in call.edges[:k + 1]]
    cond = simplify(logical_and(taken[k], *(Expr("not", (c,)) for c in taken[:k])))
    if cond.is_const:
        return call.g if cond.value else None
    return where_else_zeros(call.node.domain, call.g, identity_index(call.node.domain), cond)


def where_else_zeros(domain: tuple, value: RT, index: Expr, cond: Expr) -> RT:
    """A MergeOp over ``domain``: ``value`` read at ``index`` where ``cond``, zeros elsewhere."""
    ctx, site = value.ctx, user_site()
    value = materialize(value, site)
    shape = RT(ctx, value.node, value.out, index).shape
    zeros = F.zeros(shape, value.dtype)
    node = ctx.sdg.add_node(ops.MergeOp(), ctx.order(domain), (shape,), (value.dtype,), site)
    ctx.sdg.add_edge(Edge(node.id, 0, value.node.id, value.out, index, cond))
    ctx.sdg.add_edge(Edge(node.id, 1, zeros.node.id, zeros.out, identity_index(zeros.node.domain)))
    return RT(ctx, node)


def rule_for(op: ops.Op) -> Rule:
    rule = VJP.get(type(op))
    if rule is None:
        raise TempoError(f"no VJP rule for {op.name}: cannot differentiate through it")
    return rule

