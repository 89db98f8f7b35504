"""Reads that grow with a loop's counter, as buffers of a fixed number of rows read whole and masked.

A read ``x[0:t+1]`` (causal attention's keys, ``k[l, 0:t+1]``) or
``x[max(0, t-w+1):t+1]`` (a window's) of a value written at every ``t``
changes shape at every step: a backend that compiles per shape compiles at
every step, and the loop over ``t`` cannot run as one device program
(:mod:`tempo.plan.device_loops` needs shapes that do not depend on the
counter). This pass gives such reads static shapes, as TEMPO's K/V cache in
a loop's carry does (Fig. 16):

- the value read becomes a buffer of ``R`` rows carried over ``t``: ``R = T``
  (the dim's bound, or the rows :class:`Config` gives the dim) for ``x[0:t+1]``, position ``p`` at
  row ``p`` (where ``t`` ends at run time, ``tpo.end_when``, only with rows given: its bound is then
  the length it ends at, known after the loop); ``R = w``
  for a window of ``w``, position ``p`` at row ``p % w`` (a circular buffer).
  ``buffer[t]`` is ``buffer[t - 1]`` with the row of ``t`` set to ``x[t]``
  (zeros at ``t = 0``): a ``where`` over the rows, which the JAX backend
  computes as an in-place row update. The buffer holds its rows before the
  value's last axis (a K/V buffer of (batch, heads, ``R``, head size): each
  head's rows one run of memory, which attention's products read whole)
  and is read through a permutation that puts them first;
- the read becomes ``buffer[t]``, and every op downstream of it holds ``R``
  rows where it held the read's length (``t + 1``, ``min(t + 1, w)``); the
  rows not yet written (row ``r > t``) are masked by the ops that mix rows:
  each input such an op reads along that axis is set, at those rows, to the
  op's neutral value (``-inf`` before a max, ``+inf`` before a min, 0 before a
  sum or a product contracting the axis). A buffer's rows are finite (zeros
  or earlier rows), so an input that is the buffer itself, or a layout view
  of it, is not masked before a product, unless :attr:`Config.mask_products`
  (a backend whose products skip the rows a mask zeroes,
  :attr:`tempo.runtime.backends.base.Backend.skips_masked_rows`: JAX's native
  stacked products): then every product reading it gets it masked with 0, so
  that a step reads the ``t + 1`` rows written so far, not the buffer's ``R``.

Which ops may read the rows so is a rule per op type (:data:`RULES`): a row-wise
op (elementwise, cast, copy, permutation, expansion, squeeze, a reshape that keeps
the axis) keeps each row apart; a sum, max or min over the axis, and a product
contracting it, mix rows and get the mask; a mean (it divides by the count), a
scan, an index, a gather, a concatenation and every op without a rule keep the
read as it is. Those that the rules accept add up the rows in any order, so the
circular buffer's order of a window's rows computes the same (up to the order
of floating-point additions).

The pass runs for a backend that compiles loops (:attr:`Backend.compiles_loops`:
JAX), before fusion folds the masks into their islands. On NumPy a read of
``t + 1`` rows is a view and costs less than the buffer: the pass is off.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import numpy as np

from tempo.ir import ops
from tempo.ir.ends import ends
from tempo.ir.ops import Array
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import infer, same_size
from tempo.symbolic.affine import uses
from tempo.symbolic.expr import Expr, as_expr, bound_of, seq
from tempo.symbolic.simplify import simplify
from tempo.transforms.editing import Graph


@dataclass(frozen=True)
class Config:
    """``enabled``: rewrite the reads that grow with a counter (the compiler turns it on for a backend
    that compiles loops). ``rows``: dim name -> the rows of the buffers of its reads ``x[0:t+1]``, at
    least the bound every run gives the dim (a caller that compiles for one run knows it: a decoder's
    new tokens); without, the dim's bound, and a dim that ends at run time keeps such reads.
    ``mask_products``: mask the buffer (or a layout view of it) before every product that reads it
    (the compiler turns it on for a backend whose products skip masked rows)."""

    enabled: bool = False
    rows: Mapping[str, int] = field(default_factory=dict)
    mask_products: bool = False


@dataclass(frozen=True)
class Growing:
    """A read ``edge`` of ``x[..., start:dim + 1, ...]`` at the reader's own point but along ``dim``:
    ``width`` None for ``start = 0``, else the window's ``w`` (``start = max(0, dim - w + 1)``);
    ``length``: the read's length along ``dim``."""

    edge: Edge
    dim: Expr
    width: int | None
    length: Expr


KEEP = "keep"  # a rule's answer: the op keeps each row apart, no mask
Rule = Callable[[ops.Op, int, int, list], "float | str | None"]
RULES: dict[type, Rule] = {}


def rule(*types: type):
    """Register the decorated function as the rule of ops of ``types``: ``(op, input, axis, input shapes)
    ->`` :data:`KEEP` (each row kept apart), the neutral value the input is masked with along ``axis``
    (the op mixes rows), or None (the op cannot read rows past the counter)."""
    def register(fn: Rule) -> Rule:
        for t in types:
            RULES[t] = fn
        return fn
    return register


LAYOUT = (ops.PermuteOp, ops.ReshapeOp, ops.UnsqueezeOp, ops.SqueezeOp, ops.ExpandOp, ops.IdentOp, ops.CastOp)


@rule(ops.ElementwiseOp, ops.CastOp, ops.IdentOp, ops.PermuteOp, ops.UnsqueezeOp, ops.ExpandOp)
def _row_wise(op, k, axis, shapes):
    return KEEP


@rule(ops.SqueezeOp)
def _squeeze(op: ops.SqueezeOp, k, axis, shapes):
    return None if op.axis % len(shapes[0]) == axis else KEEP


@rule(ops.ReshapeOp)
def _reshape(op: ops.ReshapeOp, k, axis, shapes):
    before, shape = _product(shapes[0][:axis]), shapes[0]
    for m, d in enumerate(op.shape):
        if same_size(d, shape[axis]) and same_size(_product(op.shape[:m]), before):
            return KEEP
    return None


@rule(ops.ReduceOp)
def _reduce(op: ops.ReduceOp, k, axis, shapes):
    if axis not in {a % len(shapes[0]) for a in op.axes}:
        return KEEP
    return {"sum": 0.0, "max": -np.inf, "min": np.inf}.get(op.fn)


@rule(ops.MatMulOp)
def _matmul(op, k, axis, shapes):
    rank = len(shapes[k])
    contracted = rank - 1 if k == 0 else max(rank - 2, 0)
    return 0.0 if axis == contracted else KEEP


def _product(sizes):
    out = 1
    for s in sizes:
        out = out * s
    return out


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """``sdg`` with each read that grows with a counter (see the module docstring) read from a buffer of
    a fixed number of rows, masked; a read whose readers some rule refuses is left as it is."""
    if not cfg.enabled:
        return sdg
    groups: dict[tuple, list[Growing]] = {}
    ending = set(ends(sdg))
    for e in sdg.edges:
        read = _growing(sdg, e)
        if read is None:
            continue
        rows = read.width or cfg.rows.get(read.dim.name) or (None if read.dim in ending else bound_of(read.dim))
        if rows is not None:
            groups.setdefault((read.length, read.dim, read.width, rows), []).append(read)
    if not groups:
        return sdg
    g = Graph(sdg)
    for (*_, rows), reads in groups.items():
        _rewrite(g, reads, rows, cfg.mask_products)
    return g.to_sdg()


def _growing(sdg: SDG, e: Edge) -> Growing | None:
    """``e`` as a :class:`Growing` read, or None."""
    if e.sink_in < 0 or e.cond is not None or e.sink in sdg.vectorized or e.src in sdg.vectorized:
        return None
    sink, src = sdg.nodes[e.sink], sdg.nodes[e.src]
    if len(sink.domain) != len(src.domain) or any(a is not b for a, b in zip(sink.domain, src.domain)):
        return None
    slices = [m for m, a in enumerate(e.index.args) if a.op == "slice"]
    if len(slices) != 1 or any(a is not d for m, (a, d) in enumerate(zip(e.index.args, src.domain)) if m != slices[0]):
        return None
    dim = src.domain[slices[0]]
    start, stop = e.index.args[slices[0]].args
    if not _is_const(simplify(stop - dim), 1):
        return None
    width = _window(start, dim)
    if width is None and not _is_const(simplify(start), 0):
        return None
    return Growing(e, dim, width, simplify(stop - start))


def _window(start: Expr, dim: Expr) -> int | None:
    """``w`` where ``start`` is ``max(0, dim - w + 1)`` with ``w >= 1``."""
    if start.op != "max" or len(start.args) != 2:
        return None
    zero = [a for a in start.args if _is_const(a, 0)]
    rest = [a for a in start.args if not _is_const(a, 0)]
    if len(zero) != 1 or len(rest) != 1:
        return None
    back = simplify(rest[0] - dim)
    return int(1 - back.value) if back.is_const and back.value <= 0 else None


def _is_const(e: Expr, value: int) -> bool:
    return e.is_const and e.value == value


def _rewrite(g: Graph, reads: list[Growing], rows, mask_products: bool) -> None:
    """Rewrite ``reads`` (one length along one dim) and their readers, the buffers of ``rows`` rows, or
    leave them all as they are; ``mask_products``: see :class:`Config`."""
    length, dim, width = reads[0].length, reads[0].dim, reads[0].width
    domain = g.nodes[reads[0].edge.sink].domain
    growing = {(r.edge.sink, r.edge.sink_in) for r in reads}
    order = _closure(g, {r.edge.sink for r in reads}, length, domain)
    if order is None:
        return
    masks, finite = {}, {}
    for n in order:
        node = g.nodes[n]
        shapes = [g.read_shape(e) for e in g.inputs(n)]
        carried = []
        for e, shape in zip(g.inputs(n), shapes):
            axes = [a for a, d in enumerate(shape) if _is_length(d, length)]
            if not axes:
                continue
            from_buffer = (n, e.sink_in) in growing
            if len(axes) > 1 or not (from_buffer or e.src in finite and e.cond is None and _at_point(e, domain)):
                return
            fn = RULES.get(type(node.op))
            answer = None if fn is None else fn(node.op, e.sink_in, axes[0], shapes)
            if answer is None:
                return
            is_finite = from_buffer or finite[e.src]
            if isinstance(node.op, ops.MatMulOp) and is_finite:
                answer = 0.0 if mask_products else KEEP
            if answer != KEEP:
                masks.setdefault(n, []).append((e.sink_in, axes[0], len(shape), answer))
            carried.append(is_finite)
        finite[n] = isinstance(node.op, LAYOUT) and all(carried)
    numbers = _numbers(g, rows)
    buffers: dict[tuple[int, int], Node] = {}
    for r in reads:
        key = (r.edge.src, r.edge.src_out)
        if key not in buffers:
            buffers[key] = _buffer(g, key, domain, dim, rows, width, numbers)
        g.connect(replace(r.edge, src=buffers[key].id, src_out=0, index=seq(*domain)))
    fills: dict[tuple, Node] = {}
    for n in order:  # sources first: each reader's inputs masked, its shapes with the buffer's rows
        for port, axis, rank, fill in masks.get(n, ()):
            e = g.ins[n][port]
            if (fill, g.dtype(e)) not in fills:
                fills[(fill, g.dtype(e))] = _node(g, ops.ConstOp(Array(np.asarray(fill, dtype=g.dtype(e)))), (), [])
            column = _node(g, ops.ReshapeOp((rows,) + (1,) * (rank - axis - 1)), domain,
                           [(_written(g, domain, dim, numbers), seq(*domain))])
            masked = _node(g, ops.ElementwiseOp("where"), domain,
                           [(column, seq(*domain)), (g.nodes[e.src], e.index), (fills[(fill, g.dtype(e))], seq())],
                           src_out=(0, e.src_out, 0))
            g.connect(Edge(n, port, masked.id, 0, seq(*domain)))
        node = g.nodes[n]
        op = node.op
        if isinstance(op, (ops.ReshapeOp, ops.ExpandOp)):
            op = replace(op, shape=tuple(rows if _is_length(d, length) else d for d in op.shape))
        edges = g.inputs(n)
        shapes, dtypes = infer(op, [g.read_shape(e) for e in edges], [g.dtype(e) for e in edges])
        g.set_node(replace(node, op=op, shapes=tuple(shapes), dtypes=tuple(dtypes)))


def _is_length(d, length: Expr) -> bool:
    """Whether the size ``d`` is ``length``."""
    return not isinstance(d, int) and _is_const(simplify(as_expr(d) - length), 0)


def _at_point(e: Edge, domain: tuple) -> bool:
    return len(e.index.args) == len(domain) and all(a is d for a, d in zip(e.index.args, domain))


def _closure(g: Graph, sinks: set[int], length: Expr, domain: tuple) -> list[int] | None:
    """``sinks`` and the nodes that read values holding an axis of ``length`` from them on, sources before
    readers; None where one is outside ``domain``, fetched, vectorized, a merge, a user function or an
    island, or has parameters or shapes that depend on a counter other than by that axis."""
    seen, stack = set(), list(sinks)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        node = g.nodes[n]
        if len(node.domain) != len(domain) or any(a is not b for a, b in zip(node.domain, domain)) or \
                g.is_root(n) or n in g.vectorized or isinstance(node.op, (ops.FusedOp, ops.MergeOp, ops.UDFOp)):
            return None
        seen.add(n)
        if any(_is_length(d, length) for shape in node.shapes for d in shape):
            stack += [e.sink for e in g.readers(n)]
    counters = {d.name for d in domain}
    for n in seen:
        node = g.nodes[n]
        other = [d for shape in node.shapes for d in shape if not isinstance(d, int) and not _is_length(d, length)]
        exprs = [x for x in node.op.exprs() if not _is_length(x, length)]
        if any(uses(x, c) for x in other + exprs for c in counters):
            return None
    return _sources_first(g, seen)


def _sources_first(g: Graph, nodes: set[int]) -> list[int]:
    """``nodes`` in an order where each comes after those of ``nodes`` it reads."""
    order, done = [], set()

    def visit(n: int) -> None:
        if n in done:
            return
        done.add(n)
        for e in g.inputs(n):
            if e.src in nodes:
                visit(e.src)
        order.append(n)

    for n in sorted(nodes):
        visit(n)
    return order


def _node(g: Graph, op: ops.Op, domain: tuple, reads: list, src_out: tuple | None = None, cond=None) -> Node:
    """A new node of ``op`` over ``domain`` reading ``reads`` (``(node, index)`` each, output ``src_out[k]``
    of input ``k``'s node, 0 by default), its shapes inferred."""
    outs = src_out or (0,) * len(reads)
    shapes = [g.read_shape(Edge(-1, k, src.id, out, index)) for k, ((src, index), out) in enumerate(zip(reads, outs))]
    dtypes = [src.dtypes[out] for (src, _), out in zip(reads, outs)]
    out_shapes, out_dtypes = infer(op, shapes, dtypes)
    node = g.add_node(op, domain, out_shapes, out_dtypes)
    for k, ((src, index), out) in enumerate(zip(reads, outs)):
        g.connect(Edge(node.id, k, src.id, out, index))
    return node


def _numbers(g: Graph, rows) -> Node:
    """The buffer's rows' numbers, ``(rows,)`` int64: ``0, 1, ..., rows - 1``, for a bound ``T`` as a running
    sum of ones (``T`` is known at run time)."""
    if isinstance(rows, int):
        return _node(g, ops.ConstOp(Array(np.arange(rows, dtype=np.int64))), (), [])
    one = _node(g, ops.ConstOp(Array(np.asarray(1, dtype=np.int64))), (), [])
    ones = _node(g, ops.ExpandOp((rows,)), (), [(one, seq())])
    return _node(g, ops.ElementwiseOp("sub"), (), [(_node(g, ops.CumSumOp(0), (), [(ones, seq())]), seq()),
                                                   (one, seq())])


def _written(g: Graph, domain: tuple, dim: Expr, numbers: Node) -> Node:
    """The rows written by step ``dim`` (``(rows,)`` bool over ``domain``: row ``r <= dim``), a node per
    reader and over the reader's domain, so that fusion folds it into the reader's island."""
    step = _node(g, ops.EvalSymbolOp(dim), domain, [])
    return _node(g, ops.ElementwiseOp("le"), domain, [(numbers, seq()), (step, seq(*domain))])


def _buffer(g: Graph, key: tuple[int, int], domain: tuple, dim: Expr, rows, width: int | None, numbers: Node) -> Node:
    """``buffer[..., dim]``: ``buffer[..., dim - 1]`` with the row of ``dim`` (``dim``, or ``dim % width``) set
    to ``x[..., dim]`` (output ``key`` of its node), zeros at ``dim = 0``; the node its readers read, the
    buffer with its rows first. The rows lie before the value's last axis (:func:`_rows_axis`)."""
    src = g.nodes[key[0]]
    shape, dtype = src.shapes[key[1]], src.dtypes[key[1]]
    axis = _rows_axis(len(shape))
    held = (*shape[:axis], rows, *shape[axis:])
    zero = _node(g, ops.ConstOp(Array(np.zeros((), dtype=dtype))), (), [])
    zeros = _node(g, ops.ExpandOp(held), (), [(zero, seq())])
    position = _node(g, ops.EvalSymbolOp(dim if width is None else dim % width), domain, [])
    column = _node(g, ops.ReshapeOp((1,) * axis + (rows,) + (1,) * (len(shape) - axis)), (), [(numbers, seq())])
    hit = _node(g, ops.ElementwiseOp("eq"), domain, [(column, seq()), (position, seq(*domain))])
    row = _node(g, ops.UnsqueezeOp(axis), domain, [(src, seq(*domain))], src_out=(key[1],))
    previous = g.add_node(ops.MergeOp(placeholder=True), domain, [held], [dtype], like=src)
    buffer = _node(g, ops.ElementwiseOp("where"), domain, [(hit, seq(*domain)), (row, seq(*domain)),
                                                          (previous, seq(*domain))])
    earlier = seq(*(d - 1 if d is dim else d for d in domain))
    g.connect(Edge(previous.id, 0, zeros.id, 0, seq(), as_expr(0) == dim))
    g.connect(Edge(previous.id, 1, buffer.id, 0, earlier, as_expr(1) <= dim))
    if axis == 0:
        return buffer
    first = (axis, *(a for a in range(len(held)) if a != axis))
    return _node(g, ops.PermuteOp(first), domain, [(buffer, seq(*domain))])


def _rows_axis(rank: int) -> int:
    """Where a buffer of a value of ``rank`` axes holds its rows: before the value's last axis, so that
    each row of the value's leading axes has its rows together (a K/V buffer of (batch, heads, rows,
    head size): each head's keys one run of memory, as attention's products read them, where rows
    first would lay them a position's heads apart)."""
    return max(rank - 1, 0)
