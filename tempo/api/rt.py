"""Recurrent tensors: tensors with temporal dimensions indexed symbolically.

A :class:`RecurrentTensor` is a handle on one output of an SDG node, seen
through an optional temporal *access*: ``x[t - 1]`` or ``r[t:T]`` is not a new
operator but a view whose index becomes the dependence expression of the edge
from whatever consumes it. Its domain is the set of step symbols the access
mentions; each slice in the access adds a leading spatial axis (of a size such
as ``T - t``).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Sequence

import numpy as np

from tempo.api.context import Context, current
from tempo.errors import DefinitionError, DomainError, ShapeError, TempoError, user_site
from tempo.ir import ops
from tempo.ir.sdg import Edge, Node, identity_index
from tempo.ir.shapes import fmt, infer, same_size, size
from tempo.symbolic.expr import Expr, as_expr, bound_of, logical_and, seq
from tempo.symbolic.simplify import simplify


class RecurrentTensor:
    """One output of an SDG node, optionally through a temporal access."""

    __slots__ = ("ctx", "node", "out", "access", "domain", "shape", "dtype")
    __hash__ = object.__hash__

    def __init__(self, ctx: Context, node: Node, out: int = 0, access: Expr | None = None):
        self.ctx, self.node, self.out, self.access = ctx, node, out, access
        spatial = node.shapes[out]
        if access is None:
            self.domain = node.domain
            self.shape = tuple(spatial)
        else:
            self.domain = ctx.order(steps_in(access))
            sizes = tuple(size(a.args[1] - a.args[0]) for a in access.args if a.op == "slice")
            self.shape = sizes + tuple(spatial)
        self.dtype = node.dtypes[out]

    # ----- temporal indexing -----
    def index_expr(self) -> Expr:
        """The dependence expression reading this tensor, over the reader's steps."""
        return self.access if self.access is not None else identity_index(self.node.domain)

    def __getitem__(self, key) -> "RecurrentTensor":
        site = user_site()
        if _is_condition(key):
            return _conditional(self, as_expr(key), site)
        items = _key_items(self, key, site)
        if self.access is None:
            return RecurrentTensor(self.ctx, self.node, self.out, _check_access(self, seq(*items), site))
        if any(i.op == "slice" for i in items) and not _is_identity_like(self.access):
            return materialize(self, site)[key]
        mapping = dict(zip(self.domain, items))
        composed = seq(*(simplify(a.substitute(mapping)) for a in self.access.args))
        return RecurrentTensor(self.ctx, self.node, self.out, _check_access(self, composed, site))

    def __setitem__(self, key, value) -> None:
        define_branch(self, key, value, user_site())

    # ----- spatial indexing -----
    @property
    def spatial(self) -> "_SpatialIndexer":
        """NumPy-style basic indexing of the spatial axes: ``x.spatial[1, 0:k]``."""
        return _SpatialIndexer(self)

    def __repr__(self) -> str:
        dom = ", ".join(d.name for d in self.domain)
        where = f" @ {self.node.site}" if self.node.site else ""
        return f"RT[{dom}]{fmt(self.shape)}:{self.dtype}{where}"

    def __bool__(self) -> bool:
        raise TempoError("a recurrent tensor has no truth value before run time; use tpo.where", user_site())

    def __iter__(self):
        raise TempoError("recurrent tensors are not iterable; index them instead", user_site())


def _is_identity_like(e: Expr) -> bool:
    return all(a.op == "sym" and a.kind == "step" for a in e.args)


def steps_in(e: Expr) -> set[Expr]:
    return {s for s in e.free_symbols() if s.kind == "step"}


def _is_condition(key) -> bool:
    return isinstance(key, Expr) and key.is_boolean


def _key_items(rt: RecurrentTensor, key, site) -> list[Expr]:
    items = list(key) if isinstance(key, tuple) else [key]
    if len(items) > len(rt.domain):
        raise DomainError(f"{len(items)} temporal indices for a tensor with {len(rt.domain)} temporal "
                          f"dims ({', '.join(d.name for d in rt.domain) or 'none'}); spatial indexing "
                          f"is spelled x.spatial[...]", site)
    out = []
    for item in items:
        if isinstance(item, RecurrentTensor):
            raise DomainError("temporal indices are symbolic expressions, not tensors", site)
        e = simplify(as_expr(item))
        if e.is_boolean:
            raise DomainError(f"a condition ({e}) must be the only temporal index", site)
        out.append(e)
    return out + list(rt.domain[len(items):])


def _check_access(rt: RecurrentTensor, access: Expr, site) -> Expr:
    rt.ctx.order(steps_in(access))  # every step symbol must be a dim of the context
    for item in access.args:
        if item.op == "slice" and item.args[0].is_const and item.args[1].is_const \
                and item.args[1].value < item.args[0].value:
            raise DomainError(f"temporal slice {item} is empty", site)
    return access


def materialize(rt: RecurrentTensor, site=None) -> RecurrentTensor:
    """``rt`` as its own node (an IdentOp when it is an access view)."""
    if rt.access is None:
        return rt
    return apply(ops.IdentOp(), [rt], site=site or user_site())


def _conditional(rt: RecurrentTensor, cond: Expr, site) -> RecurrentTensor:
    ctx = rt.ctx
    domain = ctx.order(set(rt.domain) | steps_in(cond))
    node = ctx.sdg.add_node(ops.MergeOp(), domain, (rt.shape,), (rt.dtype,), site)
    ctx.sdg.add_edge(Edge(node.id, 0, rt.node.id, rt.out, rt.index_expr(), simplify(cond)))
    return RecurrentTensor(ctx, node)


# ----- building nodes -----
def _op_steps(op: ops.Op) -> set[Expr]:
    out: set[Expr] = set()
    for f in fields(op):
        value = getattr(op, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Expr):
                out |= steps_in(item)
    return out


def apply(op: ops.Op, inputs: Sequence[RecurrentTensor], site=None, ctx: Context | None = None,
          label: str = "", over: Sequence[Expr] = ()) -> RecurrentTensor | tuple[RecurrentTensor, ...]:
    """Add ``op`` reading ``inputs`` to the SDG; returns its output RT(s).

    The node's domain is the union of the inputs' domains, of the step
    symbols in the op's parameters and of ``over``, in the context's dimension order.
    """
    site = site or user_site()
    ctx = ctx or (inputs[0].ctx if inputs else current())
    for x in inputs:
        if x.ctx is not ctx:
            raise TempoError("recurrent tensors from two different contexts cannot interact: build every "
                             "tensor of a program inside the same `with ctx:` block", site)
    steps = set(_op_steps(op)) | set(over)
    for x in inputs:
        steps |= set(x.domain)
    try:
        domain = ctx.order(steps)
        shapes, dtypes = infer(op, [x.shape for x in inputs], [x.dtype for x in inputs])
    except TempoError as err:
        raise type(err)(f"{op.name}: {err.problem}", site) from None
    node = ctx.sdg.add_node(op, domain, shapes, dtypes, site, label)
    for k, x in enumerate(inputs):
        ctx.sdg.add_edge(Edge(node.id, k, x.node.id, x.out, x.index_expr()))
    outs = tuple(RecurrentTensor(ctx, node, j) for j in range(op.num_outputs))
    return outs[0] if len(outs) == 1 else outs


def lift(x, dtype_hint: str | None = None, ctx: Context | None = None) -> RecurrentTensor:
    """A Python or NumPy value as a constant RT (RTs pass through)."""
    if isinstance(x, RecurrentTensor):
        return x
    if isinstance(x, Expr):
        from tempo.api.functional import eval_symbol

        return eval_symbol(x)
    array = np.asarray(x)
    if array.dtype == object:
        raise TempoError(f"cannot make a tensor from {type(x).__name__}", user_site())
    if isinstance(x, (bool, int, float)):
        array = array.astype(_weak_dtype(x, dtype_hint))
    ctx = ctx or current()
    node = ctx.sdg.add_node(ops.ConstOp(ops.Array(array)), (), (tuple(array.shape),), (str(array.dtype),),
                            user_site())
    return RecurrentTensor(ctx, node)


def _weak_dtype(x: bool | int | float, hint: str | None) -> str:
    """Python scalars take the dtype of the tensor they meet, as JAX's weak types do."""
    kind = np.dtype(hint).kind if hint is not None else None
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return hint if kind in ("i", "u", "f") else "int64"
    return hint if kind == "f" else "float32"


# ----- branching definitions -----
def define_branch(rt: RecurrentTensor, key, value, site) -> None:
    """``rt[key] = value`` for a placeholder: add one branch to its MergeOp."""
    if not (isinstance(rt.node.op, ops.MergeOp) and rt.node.op.placeholder and rt.access is None):
        raise DefinitionError("only placeholders (tpo.placeholder) can be defined with x[...] = value", site)
    value = lift(value, rt.dtype, rt.ctx)
    if value.ctx is not rt.ctx:
        raise DefinitionError("the right side belongs to another context than the placeholder: build both "
                              "inside the same `with ctx:` block", site)
    if value.dtype != rt.dtype:
        raise ShapeError(f"dtype mismatch: placeholder is {rt.dtype}, right side is {value.dtype} "
                         f"(use .cast({rt.dtype!r}))", site)
    if len(value.shape) != len(rt.shape) or not all(same_size(a, b) for a, b in zip(value.shape, rt.shape)):
        raise ShapeError(f"shape mismatch: placeholder has shape {fmt(rt.shape)}, right side {fmt(value.shape)}",
                         site)
    mapping, conds = _invert_key(rt, key, value, site)
    extra = set(value.domain) - set(rt.domain)
    if extra:
        raise DomainError(f"the right side varies with {', '.join(sorted(d.name for d in extra))}, which is "
                          f"not a dim of the placeholder ({', '.join(d.name for d in rt.domain)})", site)
    index = seq(*(simplify(a.substitute(mapping)) for a in value.index_expr().args))
    cond = simplify(logical_and(*conds)) if conds else None
    if cond is not None and cond.is_const:
        if not cond.value:
            raise DefinitionError(f"the key {key} never matches a point of the domain", site)
        cond = None
    sdg = rt.ctx.sdg
    sdg.add_edge(Edge(rt.node.id, len(sdg.in_edges(rt.node.id)), value.node.id, value.out, index, cond))


def restart(state: RecurrentTensor, value, dims: Sequence[Expr] = ()) -> None:
    """Make a placeholder's first branch (``s[0] = ...``) read ``value`` instead (resuming from a checkpoint).

    ``value``'s leading axes are bound to ``dims`` (as in ``tpo.from_numpy``):
    ``dims=(b,)`` restarts a state kept per environment ``b`` from an array
    shaped ``(B, *state.shape)``.
    """
    from tempo.api.functional import from_numpy

    sdg = state.ctx.sdg
    value = np.asarray(value)
    lead = len(tuple(dims))
    if value.shape[lead:] != tuple(state.shape) or value.ndim != lead + len(state.shape) \
            or str(value.dtype) != state.dtype:
        raise ShapeError(f"cannot restart {state!r} from a {value.dtype} array of shape {value.shape}", user_site())
    k, first = next((k, e) for k, e in enumerate(sdg.edges) if e.sink == state.node.id and e.sink_in == 0)
    const = from_numpy(value, dims=dims)
    sdg.edges[k] = Edge(first.sink, 0, const.node.id, 0, const.index_expr(), first.cond)


def _invert_key(rt: RecurrentTensor, key, value: RecurrentTensor, site) -> tuple[dict, list]:
    if _is_condition(key):
        cond = as_expr(key)
        unknown = steps_in(cond) - set(rt.domain)
        if unknown:
            raise DomainError(f"condition {cond} uses {', '.join(s.name for s in unknown)}, not a dim of "
                              f"the placeholder", site)
        return {}, [cond]
    items = list(key) if isinstance(key, tuple) else [key]
    if len(items) > len(rt.domain):
        raise DomainError(f"{len(items)} indices for a placeholder with {len(rt.domain)} temporal dims", site)
    mapping, conds = {}, []
    for d, item in zip(rt.domain, items):
        k = simplify(as_expr(item))
        k_steps = steps_in(k)
        if k is d:
            continue
        foreign = k_steps - set(rt.domain)
        if foreign:
            raise DomainError(f"key {k} uses {', '.join(sorted(s.name for s in foreign))}, not a dim of the "
                              f"placeholder ({', '.join(x.name for x in rt.domain)})", site)
        if k.op == "slice" or k.is_boolean:
            raise DefinitionError(f"key {k} for dim {d.name}: use a point such as {d.name}+1, or a condition",
                                  site)
        if not k_steps:
            if d in value.domain:
                raise DefinitionError(f"the key fixes {d.name} = {k} but the right side varies with {d.name}; "
                                      f"index the right side at {k} too", site)
            conds.append(Expr("eq", (d, k)))
        elif k_steps == {d} and simplify(k - d).is_const:
            shift = simplify(k - d).value
            mapping[d] = d - shift
            if shift > 0:
                conds.append(d >= shift)
            elif shift < 0:
                conds.append(d < bound_of(d) + shift)
        else:
            raise DefinitionError(f"unsupported key {k} for dim {d.name}: keys are {d.name}, "
                                  f"{d.name} + c, a constant, or a condition", site)
    return mapping, conds


class _SpatialIndexer:
    __slots__ = ("rt",)

    def __init__(self, rt: RecurrentTensor):
        self.rt = rt

    def __getitem__(self, key) -> RecurrentTensor:
        site = user_site()
        items = key if isinstance(key, tuple) else (key,)
        shape = self.rt.shape
        if len(items) > len(shape):
            raise ShapeError(f"{len(items)} spatial indices for a tensor of shape {fmt(shape)}", site)
        exprs = []
        for item, dim in zip(items, shape):
            if isinstance(item, slice):
                if item.step not in (None, 1):
                    raise ShapeError("spatial slices take step 1 only", site)
                start = 0 if item.start is None else item.start
                stop = dim if item.stop is None else item.stop
                start = dim + start if isinstance(start, int) and start < 0 else start
                stop = dim + stop if isinstance(stop, int) and stop < 0 else stop
                exprs.append(Expr("slice", (as_expr(start), as_expr(stop))))
            elif isinstance(item, (int, np.integer, Expr)):
                exprs.append(as_expr(dim + item if isinstance(item, (int, np.integer)) and item < 0 else item))
            else:
                raise ShapeError(f"unsupported spatial index {item!r}", site)
        return apply(ops.SpatialIndexOp(tuple(exprs)), [self.rt], site=site)
