"""Vectorization (TEMPO §4.2, TimeRL Alg. 2): a dim becomes a leading spatial axis of the ops that allow it.

Per dim ``d``, the pass picks the set of operators that can run for all of
``d``'s points at once, and rewrites each into one op over a leading axis of
size ``D``: the schedule loses a loop for them and each kernel call does
``D`` times the work, which is what makes a batch dim cheap and what turns
an RL learner's forward and backward over ``t`` into one launch.

* When no point of ``d`` depends on another (every read of a tensor over
  ``d`` is at ``d`` itself or at the whole ``0:D``, and no condition, shape
  or op parameter mentions ``d``), every node over ``d`` is vectorized: the
  batch dim ``b`` of an RL program.
* Otherwise, for every such dim but the outermost (partial vectorization),
  operators in a cycle along ``d`` (the recurrence of acting over ``t``)
  stay temporal, and so does any operator that reads another point than its
  own (``x[t + 1]``), whose op or shape mentions ``d``, that runs host code
  or feeds a UDF over ``d`` (a sink, an environment), or that may be
  undefined at some point (a conditional tensor, an unguarded ``v[t + 1]``);
  a source along ``d`` whose every reader stays temporal is not worth it.
  The rest is vectorized, and each edge is rewritten by the cases of
  TEMPO Fig. 11: both ends vectorized and read at ``d``: the index is
  dropped; a vectorized reader of a temporal source at ``d``: the read is
  promoted to ``0:D`` (a stacked read, after the source's loop); a source
  that does not vary over ``d``: broadcast; a temporal reader of a vectorized
  source at a point: the whole tensor is read and the point selected
  (``IndexSelect``, a spatial index at the reader's point).

Per-op rules live in :data:`RULES`; a rule gets the op and which inputs carry
the new axis and returns the batched op, plus adapter ops for inputs that
must be reshaped first and ops to apply after.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.ir.ends import ends
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import infer, normalize_axis, size
from tempo.symbolic.expr import Expr, bound_of, make_slice, seq
from tempo.transforms.batchable import vectorizable_set, whole_dim


@dataclass(frozen=True)
class Config:
    """``dims``: names of the dims to try (None: every dim, in the program's order).

    ``partial``: also vectorize the operators of a dim that cannot be
    vectorized whole (False: a dim is vectorized whole or not at all).
    ``stream``: dims along which what a step reads back at its own point stays
    temporal (see :func:`~tempo.transforms.batchable.vectorizable_set`); the
    tiling pass's dims, so its tiles can run while the loop goes on.
    """

    dims: tuple[str, ...] | None = None
    partial: bool = True
    stream: tuple[str, ...] = ()


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """Vectorize every dim (of ``cfg.dims``) as far as it can be; returns a new SDG.

    Independent dims go first, whole, so the batch axis leads every node it
    reaches. Then each remaining dim but the outermost is vectorized
    partially: batching the outermost loop (the iteration ``i`` of a training
    program) would defer its operators past the whole run, holding every
    iteration's values they read. The dims of a ``tpo.end_when`` check are
    never vectorized whole, and its outer dims not at all: each point of
    them has its own length of the dim it ends; nor is the dim it ends in a
    node that lacks one of those outer dims (a ``tpo.eval_symbol(t)`` read
    by every ``i``), whose points are the same for every length.
    """
    order = [d for d in dim_order(sdg) if cfg.dims is None or d.name in cfg.dims]
    checks = [sdg.nodes[n].domain for n in ends(sdg).values()]  # a tpo.end_when's dims stay loops,
    kept = {d for domain in checks for d in domain}              # its outer dims wholly
    outer = {d for domain in checks for d in domain[:-1]}
    temporal = []
    for d in order:
        chosen = None if d in kept else whole_dim(sdg, d)
        if chosen:
            sdg = vectorize(sdg, d, chosen)
        else:
            temporal.append(d)
    for d in temporal[1:] if cfg.partial else ():
        if d in outer:
            continue
        chosen = vectorizable_set(sdg, d, stream=d.name in cfg.stream)
        if d in kept:
            chosen = chosen - _checked_along(sdg, d) - _without_outer(sdg, d)
        if chosen:
            sdg = vectorize(sdg, d, chosen)
    return sdg


def _checked_along(sdg: SDG, d: Expr) -> set[int]:
    """The end check of ``d`` and what it reads over ``d``, transitively: they run step by step."""
    checked = {n for t, n in ends(sdg).items() if t is d}
    stack = list(checked)
    while stack:
        for e in sdg.in_edges(stack.pop()):
            if e.src not in checked and any(x is d for x in sdg.nodes[e.src].domain):
                checked.add(e.src)
                stack.append(e.src)
    return checked


def _without_outer(sdg: SDG, d: Expr) -> set[int]:
    """The nodes over ``d`` that lack an outer dim of ``d``'s end check: vectorized, they would hold
    ``d``'s cap of points where each outer point reads its own length ``T[i]``."""
    outer = sdg.nodes[ends(sdg)[d]].domain[:-1]
    return {n for n, node in sdg.nodes.items()
            if any(x is d for x in node.domain) and not all(any(x is o for x in node.domain) for o in outer)}


def dim_order(sdg: SDG) -> list[Expr]:
    """The dims of the program, outermost first (every node's domain lists them in this order)."""
    before: dict[Expr, set[Expr]] = {}
    for node in sdg.nodes.values():
        for k, d in enumerate(node.domain):
            before.setdefault(d, set()).update(node.domain[:k])
    order: list[Expr] = []
    while len(order) < len(before):
        ready = [d for d in before if d not in order and before[d] <= set(order)]
        order.append(ready[0] if ready else next(d for d in before if d not in order))
    return order


# ----- rules -----
@dataclass
class Batched:
    """A rule's answer: the batched op, adapters per input, ops applied after."""

    op: ops.Op
    adapters: dict[int, list[ops.Op]] = field(default_factory=dict)
    after: list[ops.Op] = field(default_factory=list)


Rule = Callable[[ops.Op, list[bool], list[tuple], Expr], Batched]
RULES: dict[type, Rule] = {}
MIXED = set()  # op types whose rule handles inputs without the new axis itself
NEEDS_ONE_BATCHED = {ops.ElementwiseOp, ops.MatMulOp}  # ... given at least one input with it


def rule(*op_types: type, mixed: bool = False):
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            RULES[op_type] = fn
            if mixed:
                MIXED.add(op_type)
        return fn

    return register


def _shift(axis: int, rank: int) -> int:
    return normalize_axis(axis, rank) + 1


@rule(ops.ElementwiseOp, mixed=True)
def _elementwise(op, batched, shapes, size_d):
    rank = max(len(s) for s in shapes)
    return Batched(op, {k: [ops.UnsqueezeOp(1)] * (rank - len(s)) for k, (b, s) in enumerate(zip(batched, shapes))
                        if b and len(s) < rank})


@rule(ops.ReduceOp)
def _reduce(op, batched, shapes, size_d):
    return Batched(replace(op, axes=tuple(_shift(a, len(shapes[0])) for a in op.axes)))


@rule(ops.CumSumOp, ops.DiscountedSumOp, ops.ScanOp, ops.LinearScanOp, ops.SqueezeOp, ops.PadOp, ops.CatOp,
      ops.ArgSortOp)
def _axis(op, batched, shapes, size_d):
    return Batched(replace(op, axis=_shift(op.axis, len(shapes[0]))))


@rule(ops.AttentionOp)
def _attention(op, batched, shapes, size_d):
    return Batched(op)  # every input batched: one more leading axis, broadcast like the others


@rule(ops.TakeOp)
def _take(op, batched, shapes, size_d):
    return Batched(replace(op, axis=_shift(op.axis, len(shapes[0])), batch=op.batch + 1))


@rule(ops.UnsqueezeOp)
def _unsqueeze(op, batched, shapes, size_d):
    return Batched(replace(op, axis=_shift(op.axis, len(shapes[0]) + 1)))


@rule(ops.ReshapeOp)
def _reshape(op, batched, shapes, size_d):
    return Batched(replace(op, shape=(size_d, *op.shape)))


@rule(ops.PermuteOp)
def _permute(op, batched, shapes, size_d):
    return Batched(replace(op, axes=(0, *(_shift(a, len(shapes[0])) for a in op.axes))))


@rule(ops.ExpandOp)
def _expand(op, batched, shapes, size_d):
    return Batched(replace(op, shape=(size_d, *op.shape)), {0: [ops.UnsqueezeOp(1)] * (len(op.shape) - len(shapes[0]))})


@rule(ops.SpatialIndexOp, mixed=True)
def _spatial_index(op, batched, shapes, size_d):
    rows = make_slice(0, size_d)
    if batched[0]:
        return Batched(replace(op, items=(rows, *op.items)))
    at = next((k for k, item in enumerate(op.items) if item.op == "sym" and item.kind == "step"
               and _is_vectorized_dim(item, size_d)), None)
    if at is None:
        return Batched(replace(op, items=(rows, *op.items)), {0: [ops.UnsqueezeOp(0), ops.ExpandOp((size_d, *shapes[0]))]})
    rank = len(shapes[0])
    axes = (at, *range(at), *range(at + 1, rank))
    items = (rows, *op.items[:at], *op.items[at + 1:])
    return Batched(replace(op, items=items), {0: [ops.PermuteOp(axes)]})


def _is_vectorized_dim(item: Expr, size_d: Expr) -> bool:
    return bound_of(item) is size_d


@rule(ops.CastOp, ops.IdentOp)
def _same(op, batched, shapes, size_d):
    return Batched(op)


@rule(ops.MatMulOp, mixed=True)
def _matmul(op, batched, shapes, size_d):
    (fa, fb), (a, b) = batched, shapes
    adapters, after = {}, []
    if fa and len(a) == 1:
        adapters[0], after = [ops.UnsqueezeOp(1)], [ops.SqueezeOp(-2)]
        a = (1, *a)
    if fb and len(b) == 1:
        adapters[1] = [ops.UnsqueezeOp(2)]
        after = after + [ops.SqueezeOp(-1)]
        b = (*b, 1)
    if fa and fb and len(a) != len(b):
        short = 0 if len(a) < len(b) else 1
        adapters[short] = adapters.get(short, []) + [ops.UnsqueezeOp(1)] * abs(len(a) - len(b))
    elif fb and not fa and len(a) > 2:
        raise _Refuse("a batched matrix on the right of a stack of matrices")
    return Batched(op, adapters, after)


@rule(ops.UDFOp, mixed=True)
def _udf(op, batched, shapes, size_d):
    if op.batched:  # fn takes one leading batch axis: this one; a further dim goes row by row
        return Batched(replace(op, batched=False, out_shapes=tuple((size_d, *s) for s in op.out_shapes)),
                       {k: [ops.UnsqueezeOp(0), ops.ExpandOp((size_d, *s))]
                        for k, (b, s) in enumerate(zip(batched, shapes)) if not b})
    return Batched(replace(op, fn=_row_by_row(op.fn, batched), out_shapes=tuple((size_d, *s) for s in op.out_shapes)))


def _row_by_row(fn, batched: list[bool]):
    def run(*inputs):
        rows = next(len(x) for x, b in zip(inputs, batched) if b)
        results = []
        for r in range(rows):
            out = fn(*(x[r] if b else x for x, b in zip(inputs, batched)))
            results.append(tuple(out) if isinstance(out, (tuple, list)) else (out,))
        return tuple(np.stack(parts) for parts in zip(*results))

    return run


@rule(ops.MergeOp, mixed=True)
def _merge(op, batched, shapes, size_d):
    return Batched(replace(op, broadcast=tuple(k for k, b in enumerate(batched) if not b)))


class _Refuse(Exception):
    """The dim cannot be vectorized after all (a case no rule handles)."""


# ----- the rewrite -----
def vectorize(sdg: SDG, d: Expr, chosen: frozenset[int] | None = None) -> SDG:
    """The SDG with ``d`` turned into a leading spatial axis of the ``chosen`` nodes
    (None: every node over ``d``)."""
    if chosen is None:
        chosen = frozenset(n for n, node in sdg.nodes.items() if d in node.domain)
    try:
        return _Rewrite(sdg, d, chosen).run()
    except _Refuse:
        return sdg


class _Rewrite:
    def __init__(self, sdg: SDG, d: Expr, chosen: frozenset[int]) -> None:
        self.old, self.d, self.size, self.chosen = sdg, d, bound_of(d), chosen
        self.new = SDG({}, [], sdg._next_id, dict(sdg.vectorized), sdg.roots, dict(sdg.moved), dict(sdg.tiles))

    def run(self) -> SDG:
        for n in sorted(self.old.nodes):
            node = self.old.nodes[n]
            if n in self.chosen:
                self._batch(node)
            else:
                self.new.nodes[n] = node
                for e in self.old.in_edges(n):
                    self.new.add_edge(self._temporal_read(e, node))
        return self.new

    def _temporal_read(self, e: Edge, sink: Node) -> Edge:
        """``e`` into a node that stays temporal over ``d``; a read of one point of a
        vectorized source reads it whole and selects the point (``IndexSelect``)."""
        if e.src not in self.chosen:
            return e
        src = self.old.nodes[e.src]
        pos = src.domain.index(self.d)
        item = e.index.args[pos]
        if item.op == "slice":
            return self._adapted(e, self._layout(e), sink.domain, sink)
        stacked = sum(1 for a in e.index.args if a.op == "slice")
        front = self._to_front(stacked, stacked + 1 + len(src.shapes[e.src_out]))
        return self._adapted(e, front + [ops.SpatialIndexOp((item,))], sink.domain, sink)

    @staticmethod
    def _to_front(axis: int, rank: int) -> list[ops.Op]:
        if axis == 0:
            return []
        return [ops.PermuteOp((axis, *range(axis), *range(axis + 1, rank)))]

    def _promoted(self, e: Edge) -> bool:
        """A read at ``d`` of a source that stays temporal, by a vectorized node."""
        src = self.old.nodes[e.src]
        return (e.sink in self.chosen and e.src not in self.chosen and self.d in src.domain
                and e.index.args[src.domain.index(self.d)] is self.d)

    def _layout(self, e: Edge) -> list[ops.Op]:
        """Adapters that give a read of a batched source its original axis order.

        A slice read stacks the temporal axes in front of the spatial ones, so the
        new batch axis lands after all stacked axes: move it back where ``d``'s
        axis was (first for a point read at ``d``; in domain order for ``0:D``).
        A promoted read (``0:D`` of a temporal source) stacks ``d`` among the
        other sliced dims: move it first.
        """
        src = self.old.nodes[e.src]
        if self._promoted(e):
            pos = src.domain.index(self.d)
            before = sum(1 for a in e.index.args[:pos] if a.op == "slice")
            rank = sum(1 for a in e.index.args if a.op == "slice") + 1 + len(src.shapes[e.src_out])
            return self._to_front(before, rank)
        if e.src not in self.chosen:
            return []
        pos = src.domain.index(self.d)
        stacked = sum(1 for k, a in enumerate(e.index.args) if a.op == "slice" and k != pos)
        whole = e.index.args[pos].op == "slice"
        target = sum(1 for a in e.index.args[:pos] if a.op == "slice") if whole else 0
        if target == stacked:
            return []
        rank = stacked + 1 + len(src.shapes[e.src_out])
        rest = [k for k in range(rank) if k != stacked]
        return [ops.PermuteOp(tuple(rest[:target] + [stacked] + rest[target:]))]

    def _adapted(self, e: Edge, adapters: list[ops.Op], domain, like: Node) -> Edge:
        """The edge ``e`` without ``d``, through helper nodes applying ``adapters``."""
        index, src, out = self._drop(e), e.src, e.src_out
        for adapter in adapters:
            src = self._helper(adapter, domain, [(src, out, index)], like).id
            out, index = 0, seq(*domain)
        return replace(e, src=src, src_out=out, index=index)

    def _drop(self, e: Edge) -> Expr:
        """The index of ``e`` in the rewritten graph: without ``d`` for a vectorized source,
        with ``0:D`` at ``d`` for a promoted read, unchanged otherwise."""
        src = self.old.nodes[e.src]
        if self._promoted(e):
            whole = make_slice(0, self.size)
            return seq(*(whole if dim is self.d else item for dim, item in zip(src.domain, e.index.args)))
        if e.src not in self.chosen:
            return e.index
        return seq(*(item for dim, item in zip(src.domain, e.index.args) if dim is not self.d))

    def _batch(self, node: Node) -> None:
        domain = tuple(x for x in node.domain if x is not self.d)
        self.new.vectorized[node.id] = (self.d, *self.old.vectorized.get(node.id, ()))
        if isinstance(node.op, ops.ConstOp):
            return self._const(node, domain)
        if isinstance(node.op, (ops.EvalSymbolOp, ops.RandomOp)):
            op = replace(node.op, vectorized=(self.d, *node.op.vectorized))
            self.new.nodes[node.id] = replace(node, op=op, domain=domain, shapes=self._widen(node.shapes))
            return None
        edges = self.old.in_edges(node.id)
        batched = [self.d in self.old.nodes[e.src].domain and e.index.args[self.old.nodes[e.src].domain.index(self.d)]
                   is self.d for e in edges]  # read at d: a vectorized source, or a promoted one
        shapes = [self.old.read_shape(e) for e in edges]
        op_type = type(node.op)
        if op_type not in RULES:
            raise TempoError(f"no vectorization rule for {node.op.name}")
        adapters: dict[int, list[ops.Op]] = {}
        if op_type not in MIXED or (op_type in NEEDS_ONE_BATCHED and edges and not any(batched)):
            expand = range(len(edges)) if op_type not in MIXED else (0,)
            adapters = {k: [ops.UnsqueezeOp(0), ops.ExpandOp((self.size, *shapes[k]))]
                        for k in expand if not batched[k]}
            batched = [b or k in adapters for k, b in enumerate(batched)]
        result = RULES[op_type](node.op, batched, shapes, self.size)
        for k, extra in result.adapters.items():
            adapters[k] = adapters.get(k, []) + extra
        inputs = [self._adapted(e, self._layout(e) + adapters.get(k, []), domain, node)
                  for k, e in enumerate(edges)]
        shapes_out = self._widen(node.shapes)
        if not result.after:
            self.new.nodes[node.id] = replace(node, op=result.op, domain=domain, shapes=shapes_out)
            for e in inputs:
                self.new.add_edge(replace(e, sink=node.id))
            return None
        last = self._helper(result.op, domain, [(e.src, e.src_out, e.index) for e in inputs], node)
        for k, op in enumerate(result.after):
            final = k == len(result.after) - 1
            last = self._helper(op, domain, [(last.id, 0, seq(*domain))], node, node.id if final else None,
                                shapes_out if final else None)
        return None

    def _widen(self, shapes) -> tuple:
        return tuple((self.size, *s) for s in shapes)

    def _helper(self, op: ops.Op, domain, reads, like: Node, node_id: int | None = None, shapes=None) -> Node:
        src_shapes = [self._new_shape(s, o) if s in self.old.nodes else self.new.nodes[s].shapes[o]
                      for s, o, _ in reads]
        src_dtypes = [self._dtype(s, o) for s, o, _ in reads]
        out_shapes, out_dtypes = infer(op, [self._read_shape(s, i) for s, i in zip(src_shapes, reads)], src_dtypes)
        if node_id is None:
            node = self.new.add_node(op, domain, shapes or out_shapes, out_dtypes, like.site, like.label)
        else:
            node = Node(node_id, op, domain, shapes or out_shapes, out_dtypes, like.site, like.label)
            self.new.nodes[node_id] = node
        for k, (s, o, index) in enumerate(reads):
            self.new.add_edge(Edge(node.id, k, s, o, index))
        if like.id in self.chosen:  # a step of a batched node carries its batch axis too
            self.new.vectorized[node.id] = self.new.vectorized[like.id]
        return node

    def _read_shape(self, shape, read) -> tuple:
        index = read[2]
        slices = tuple(size(a.args[1] - a.args[0]) for a in index.args if a.op == "slice")
        return slices + tuple(shape)

    def _new_shape(self, n: int, out: int) -> tuple:
        shape = self.old.nodes[n].shapes[out]
        return (self.size, *shape) if n in self.chosen else shape

    def _dtype(self, n: int, out: int) -> str:
        return (self.old.nodes[n] if n in self.old.nodes else self.new.nodes[n]).dtypes[out]

    def _const(self, node: Node, domain) -> None:
        op = node.op
        axis = node.domain.index(self.d)
        moved = np.moveaxis(op.value.array, axis, op.num_domain_axes - 1)
        const = self.new.add_node(ops.ConstOp(ops.Array(moved), op.num_domain_axes - 1), domain,
                                  ((moved.shape[op.num_domain_axes - 1], *node.shapes[0]),), node.dtypes,
                                  node.site, node.label)
        take = ops.SpatialIndexOp((make_slice(0, self.size),))
        self.new.nodes[node.id] = Node(node.id, take, domain, self._widen(node.shapes), node.dtypes, node.site,
                                       node.label)
        self.new.add_edge(Edge(node.id, 0, const.id, 0, seq(*domain)))
