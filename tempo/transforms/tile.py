"""Tiling (TEMPO §4.3, TimeRL Alg. 3): a vectorized dim's axis is cut into tiles along a new temporal dim.

Vectorization turns an RL learner's forward and backward over ``t`` into
operators over a leading axis of size ``T``; a gradient is then one sum over
that axis. Tiling splits the axis into ``ceil(T / Z)`` tiles of ``Z`` rows
(the last may be shorter): the tiled operators run once per tile, over a
new temporal dim ``t_tile``, and each sum over the axis becomes a sum per
tile followed by the sum of the tiles' partial results (gradient
accumulation). A tile's intermediates are freed once the tile is summed,
and a tile needs only its own rows of what acting produced, so with
returns that look a bounded number of steps ahead (n-step) a tile can run
while acting continues.

The tiled set starts from the sums over the axis and grows through their
operands, stopping (TEMPO's three conditions) at a read that creates the
axis (``o[i, 0:T]`` becomes ``o[i, t_tile * Z : min(t_tile * Z + Z, T)]``),
at an operand that stays whole (its tile is sliced out:
``SpatialIndexOp``) and at an expansion to the axis (it expands to the
tile instead). An operator joins only if every reader of it is tiled or is
such a sum, and if it treats the axis row by row: it does not reduce,
scan, permute or reshape it away, and the axis is its leading one.

``Config(tiles={"t": 64})`` tiles dim ``t`` in tiles of 64 rows; the tile
dim's bound is derived from ``T`` (``SDG.tiles``), so a run gives only
``T``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node, identity_index
from tempo.ir.shapes import infer, normalize_axis
from tempo.ir.shapes import size as size_of
from tempo.symbolic.expr import Expr, bound_of, make_slice, min_, seq, step_and_bound
from tempo.transforms.vectorize import dim_order


@dataclass(frozen=True)
class Config:
    """``tiles``: dim name -> tile size (rows per tile) for each vectorized dim to tile."""

    tiles: dict = field(default_factory=dict)


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each dim of ``cfg.tiles`` tiled where a sum over its vectorized axis allows it."""
    for name, size in cfg.tiles.items():
        d = next((d for d in dim_order(sdg) if d.name == name), None)
        if d is not None:
            sdg = tile(sdg, d, int(size))
    return sdg


# Per op type, whether an op treats the leading axis as rows: a function of
# the op, its inputs' ranks and which inputs carry the axis (the others
# broadcast). An op type missing here is never tiled.
ROW_WISE: dict[type, object] = {}


def row_wise(*op_types: type):
    def register(fn):
        for op_type in op_types:
            ROW_WISE[op_type] = fn
        return fn

    return register


@row_wise(ops.ElementwiseOp, ops.CastOp, ops.IdentOp)
def _any(op, ranks, rows) -> bool:
    return True


@row_wise(ops.ReduceOp)
def _reduce(op, ranks, rows) -> bool:
    return all(normalize_axis(a, ranks[0]) != 0 for a in op.axes)


@row_wise(ops.CumSumOp, ops.DiscountedSumOp, ops.ScanOp, ops.LinearScanOp, ops.SqueezeOp, ops.PadOp, ops.CatOp)
def _axis(op, ranks, rows) -> bool:
    return normalize_axis(op.axis, ranks[0]) != 0


@row_wise(ops.UnsqueezeOp)
def _unsqueeze(op, ranks, rows) -> bool:
    return normalize_axis(op.axis, ranks[0] + 1) != 0


@row_wise(ops.PermuteOp)
def _permute(op, ranks, rows) -> bool:
    return op.axes[0] == 0


@row_wise(ops.ReshapeOp, ops.ExpandOp)
def _leading_shape(op, ranks, rows) -> bool:
    return True  # checked with the shapes: the leading size must be the axis itself


@row_wise(ops.SpatialIndexOp)
def _index(op, ranks, rows) -> bool:
    return True  # checked with the fields: the first item must take the whole axis


@row_wise(ops.MatMulOp)
def _matmul(op, ranks, rows) -> bool:
    left, right = ranks
    return (not rows[0] or left >= 2) and (not rows[1] or right >= 3)  # the axis is a batch or row axis


def tile(sdg: SDG, d: Expr, size: int) -> SDG:
    """``sdg`` with the vectorized axis of ``d`` cut into tiles of ``size`` rows (see the module doc);
    unchanged when no sum over the axis can be tiled."""
    plan = _Plan(sdg, d)
    if not plan.tiled:
        return sdg
    return _Rewrite(sdg, d, size, plan).run()


class _Plan:
    """Which nodes are tiled and which sums aggregate their tiles."""

    def __init__(self, sdg: SDG, d: Expr):
        self.sdg, self.d, self.D = sdg, d, bound_of(d)
        self.readers: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
        self.ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
        for e in sdg.edges:
            self.readers[e.src].append(e)
            self.ins[e.sink].append(e)
        for edges in self.ins.values():
            edges.sort(key=lambda e: e.sink_in)
        self.leading = {n for n, dims in sdg.vectorized.items() if dims and dims[0] is d}
        tiled = {n for n in self.leading if self._eligible(n)}
        changed = True
        while changed:
            changed = False
            for n in list(tiled):
                if any(e.sink not in tiled and not self.aggregates(e) for e in self.readers[n]):
                    tiled.discard(n)
                    changed = True
        self.tiled = tiled if any(self.aggregates(e) for n in tiled for e in self.readers[n]) else set()

    def aggregates(self, e: Edge) -> bool:
        """Whether ``e`` is read by a sum over the source's leading axis, directly or through one
        permutation that only that sum reads (its tiles can be summed)."""
        if e.cond is not None or any(a.op == "slice" for a in e.index.args):
            return False
        sink = self.sdg.nodes[e.sink]
        rank = len(self.sdg.nodes[e.src].shapes[e.src_out])
        if isinstance(sink.op, ops.PermuteOp) and e.sink not in self.leading and e.sink not in self.sdg.roots:
            after = self.readers[e.sink]
            return (len(after) == 1 and after[0].cond is None and after[0].index is identity_index(sink.domain)
                    and _sums(self.sdg.nodes[after[0].sink].op, sink.op.axes.index(0), rank))
        return _sums(sink.op, 0, rank)

    def through(self, e: Edge) -> int | None:
        """The sum that an aggregating ``e`` reaches through a permutation (None: ``e`` is the sum's)."""
        if isinstance(self.sdg.nodes[e.sink].op, ops.PermuteOp):
            return self.readers[e.sink][0].sink
        return None

    def _eligible(self, n: int) -> bool:
        node = self.sdg.nodes[n]
        rule = ROW_WISE.get(type(node.op))
        if rule is None or n in self.sdg.roots:
            return False
        for shape in node.shapes:
            if not shape or shape[0] is not self.D or _mentions(shape[1:], self.D):
                return False
        if not self._fields_allow(node.op):
            return False
        ranks, rows = [], []
        for e in self.ins[n]:
            shape = self.sdg.read_shape(e)
            kind = self._input(e, shape) if e.cond is None else None
            if kind is None:
                return False
            ranks.append(len(shape))
            rows.append(kind == "rows")
        return any(rows) and rule(node.op, ranks, rows)

    def _fields_allow(self, op: ops.Op) -> bool:
        D = self.D
        if isinstance(op, (ops.ReshapeOp, ops.ExpandOp)):
            return bool(op.shape) and op.shape[0] is D and not _mentions(op.shape[1:], D)
        if isinstance(op, ops.SpatialIndexOp):
            first = op.items[0] if op.items else None
            return first is make_slice(0, D) and not _mentions(op.items[1:], D)
        return not _mentions(tuple(getattr(op, f.name) for f in fields(op)), D)

    def _input(self, e: Edge, shape: tuple) -> str | None:
        """How an operand reads the axis: ``rows`` (its leading axis is the dim's), ``broadcast``
        (no such axis), None (some other way: the reader cannot be tiled)."""
        src = self.sdg.nodes[e.src]
        rows = "rows" if not _mentions(shape[1:], self.D) else None
        if e.src in self.leading:  # a vectorized operand: tiled, or sliced to the tile
            return None if any(a.op == "slice" for a in e.index.args) else rows
        if self.d in src.domain:  # a temporal operand: read over the whole dim, as a tile
            item = e.index.args[src.domain.index(self.d)]
            first_slice = next((a for a in e.index.args if a.op == "slice"), None)
            return rows if item is make_slice(0, self.D) and first_slice is item else None
        return None if _mentions(shape, self.D) else "broadcast"


class _Rewrite:
    def __init__(self, sdg: SDG, d: Expr, size: int, plan: _Plan):
        self.old, self.d, self.D, self.plan = sdg, d, bound_of(d), plan
        self.step, self.bound = step_and_bound(f"{d.name}_tile")
        start = self.step * size
        self.rows = make_slice(start, min_(start + size, self.D))
        self.length = size_of(self.rows.args[1] - self.rows.args[0])  # as a read of the rows measures it
        order = dim_order(sdg)
        self.before = set(order[:order.index(d)])
        self.new = SDG({}, [], sdg._next_id, dict(sdg.vectorized), sdg.roots, dict(sdg.moved),
                       {**sdg.tiles, self.bound.name: (self.D.name, size)})

    def run(self) -> SDG:
        tiled = self.plan.tiled
        self.permutes = {e.sink: e for n in tiled for e in self.plan.readers[n]
                         if self.plan.aggregates(e) and self.plan.through(e) is not None}
        for n, node in self.old.nodes.items():
            if n in self.permutes:
                continue
            if n in tiled:
                self.new.nodes[n] = replace(node, op=self._op(node.op), domain=self._domain(node.domain),
                                            shapes=tuple(self._shape(s) for s in node.shapes))
            else:
                self.new.nodes[n] = node
        for e in self.old.edges:
            if e.sink in tiled:
                self.new.add_edge(self._into_tile(e))
            elif e.src in tiled:
                self.new.add_edge(self._aggregate(e))
            elif e.src not in self.permutes:
                self.new.add_edge(e)
        return self.new

    def _domain(self, domain: tuple) -> tuple:
        at = sum(1 for x in domain if x in self.before)
        return (*domain[:at], self.step, *domain[at:])

    def _index(self, index: Expr, domain: tuple, item: Expr) -> Expr:
        """``index`` (over ``domain``, the untiled domain) with ``item`` at the tile dim's place."""
        at = sum(1 for x in domain if x in self.before)
        return seq(*index.args[:at], item, *index.args[at:])

    def _shape(self, shape: tuple) -> tuple:
        return (self.length, *shape[1:])

    def _op(self, op: ops.Op) -> ops.Op:
        swap = {self.D: self.length}
        changes = {}
        for f in fields(op):
            value = getattr(op, f.name)
            if isinstance(value, Expr):
                changes[f.name] = value.substitute(swap)
            elif isinstance(value, tuple) and any(isinstance(v, Expr) for v in value):
                changes[f.name] = tuple(v.substitute(swap) if isinstance(v, Expr) else v for v in value)
        return replace(op, **changes) if changes else op

    def _into_tile(self, e: Edge) -> Edge:
        sink = self.new.nodes[e.sink]
        src = self.old.nodes[e.src]
        if e.src in self.plan.tiled:
            return replace(e, index=self._index(e.index, src.domain, self.step))
        if e.src in self.plan.leading:  # a whole operand: its tile, sliced out
            whole = self.old.read_shape(e)
            take = ops.SpatialIndexOp((self.rows,))
            part = self.new.add_node(take, sink.domain, ((self.length, *whole[1:]),), (src.dtypes[e.src_out],),
                                     sink.site, sink.label)
            self.new.vectorized[part.id] = self.old.vectorized[e.src]
            self.new.add_edge(Edge(part.id, 0, e.src, e.src_out, e.index))
            return replace(e, src=part.id, src_out=0, index=identity_index(sink.domain))
        if self.d in src.domain:  # the read that creates the axis reads one tile
            at = src.domain.index(self.d)
            return replace(e, index=seq(*e.index.args[:at], self.rows, *e.index.args[at + 1:]))
        return e

    def _aggregate(self, e: Edge) -> Edge:
        """A sum over the leading axis of a tiled node: a partial sum per tile, and the sum of
        the partial sums (read over the whole tile dim) in the sum's place."""
        src = self.new.nodes[e.src]
        last, out = e.src, e.src_out
        chain = [e.sink] if e.sink not in self.permutes else [e.sink, self.plan.through(e)]
        for n in chain:
            step = self.old.nodes[n]
            shapes, dtypes = infer(step.op, [self.new.nodes[last].shapes[out]], [self.new.nodes[last].dtypes[out]])
            part = self.new.add_node(step.op, src.domain, shapes, dtypes, step.site, step.label)
            self.new.add_edge(Edge(part.id, 0, last, out, identity_index(src.domain)))
            last, out = part.id, 0
        acc = self._accumulate(self.new.nodes[last])
        total = self.old.nodes[chain[-1]]
        self.new.nodes[total.id] = replace(total, op=ops.IdentOp())
        return Edge(total.id, 0, acc.id, 0, self._index(e.index, self.old.nodes[e.src].domain, self.bound - 1))

    def _accumulate(self, partial: Node) -> Node:
        """The running sum of ``partial`` over the tile dim: ``acc[n] = acc[n - 1] + partial[n]``
        (``acc[-1] = 0``), so each tile's partial result is freed once it is added."""
        domain, step = partial.domain, self.step
        zero = self.new.add_node(ops.ConstOp(ops.Array(np.zeros((), partial.dtypes[0]))), (), ((),),
                                 partial.dtypes, partial.site, partial.label)
        before = self.new.add_node(ops.MergeOp(broadcast=(0,)), domain, partial.shapes, partial.dtypes,
                                   partial.site, partial.label)
        acc = self.new.add_node(ops.ElementwiseOp("add"), domain, partial.shapes, partial.dtypes, partial.site,
                                partial.label)
        previous = seq(*(x - 1 if x is step else x for x in domain))
        self.new.add_edge(Edge(before.id, 0, zero.id, 0, seq(), step == 0))
        self.new.add_edge(Edge(before.id, 1, acc.id, 0, previous, step >= 1))
        self.new.add_edge(Edge(acc.id, 0, before.id, 0, identity_index(domain)))
        self.new.add_edge(Edge(acc.id, 1, partial.id, 0, identity_index(domain)))
        return acc


def _sums(op: ops.Op, axis: int, rank: int) -> bool:
    return (isinstance(op, ops.ReduceOp) and op.fn == "sum"
            and axis in {normalize_axis(a, rank) for a in op.axes})


def _mentions(values, D: Expr) -> bool:
    for v in values if isinstance(values, tuple) else (values,):
        if isinstance(v, Expr) and D in v.free_symbols():
            return True
        if isinstance(v, tuple) and _mentions(v, D):
            return True
    return False
