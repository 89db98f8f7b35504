"""Tiling (TEMPO §4.3, TimeRL Alg. 3): a dim's axis over a whole batch is cut into tiles along a new temporal dim.

Vectorization turns an RL learner's forward and backward over ``t`` into
operators over an axis of size ``T`` (the leading axis of a vectorized
learner, or the second of PPO's explicit batch ``x[0:B, k, 0:T]``); a
gradient is then a sum, or a product contracting that axis. Tiling cuts the
axis into ``ceil(T / Z)`` tiles of ``Z`` rows (the last may be shorter): the
tiled operators run once per tile over a new temporal dim ``t_tile``, whose
bound follows from ``T`` (``SDG.tiles``), and each sum over the axis becomes
the same op over each tile plus a running sum over the tiles,
``acc[n] = acc[n - 1] + partial[n]``: gradient accumulation, each tile's
partial result freed once added.

Which operators are tiled: those that treat the axis row by row (per-op
rules in :data:`ROW_WISE`: they do not reduce, scan, reshape or contract it
away) and either lead to such a sum or read a large tensor of acting over
the whole dim (observations). Tiling stops, as TEMPO's three conditions
say, at a read that creates the axis (``o[i, 0:T]`` becomes
``o[i, t_tile*Z : min(t_tile*Z + Z, T)]``), at an operand that stays whole
(its tile is sliced out) and at an expansion to the axis (it expands to the
tile). A reader that is not tiled (a scan over the dim, such as GAE's over
a value function's outputs) reads the tiles put back together.

``Config(tiles={"t": 64})`` tiles ``t`` in tiles of 64 rows; with a device
budget and the run's bounds the pass chooses the tiles (:func:`choose_tiles`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.ir.ends import ends
from tempo.ir.sdg import SDG, Edge, Node, identity_index
from tempo.ir.shapes import infer, normalize_axis
from tempo.ir.shapes import size as size_of
from tempo.symbolic.evaluate import evaluate
from tempo.symbolic.expr import Expr, bound_of, const, make_slice, min_, seq, step_and_bound
from tempo.symbolic.simplify import simplify
from tempo.transforms.vectorize import dim_order


@dataclass(frozen=True)
class Config:
    """``tiles``: dim name -> tile size (rows per tile) for each dim to tile.

    Without ``tiles``, a ``device_budget`` (bytes) and the run's ``bounds`` (bound name ->
    value) let the pass choose: a dim is tiled when what one launch would read of acting's
    output over the whole dim is more than :data:`WHOLE_SHARE` of the budget, in tiles whose
    reads fit :data:`TILE_SHARE` of it (see :func:`choose_tiles`). With ``early`` and the
    bounds, and no budget, the pass tiles the dims whose learner can run while acting goes on
    (:func:`early_tiles`): ``tempo.api.compile`` asks for it whenever a run's bounds are known.
    """

    tiles: dict = field(default_factory=dict)
    device_budget: int | None = None
    bounds: dict = field(default_factory=dict)
    early: bool = False

    @property
    def chooses(self) -> bool:
        """Whether the pass chooses the tiles itself (from a budget, or for an early learner)."""
        return not self.tiles and (self.device_budget is not None or self.early) and bool(self.bounds)

    def __post_init__(self):
        for name, size in self.tiles.items():
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise TempoError(f"tile.Config(tiles=...) takes a positive number of rows per tile, "
                                 f"got {name!r}: {size!r}")


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each dim of ``cfg.tiles`` (or of :func:`choose_tiles`) tiled where a sum over
    its axis allows it; a dim the program does not have, or one that ends at run time
    (``tpo.end_when``, which the chosen tiles leave out), is an error."""
    tiles = cfg.tiles or (choose_tiles(sdg, cfg.device_budget, cfg.bounds) if cfg.device_budget else
                          early_tiles(sdg, cfg.bounds) if cfg.early and cfg.bounds else {})
    dims = {d.name: d for d in dim_order(sdg)}  # the dims still looped over
    known = set(dims) | {d.name for batched in sdg.vectorized.values() for d in batched}
    ending = {d.name: n for d, n in ends(sdg).items()}  # a dim that ends at run time has no tiles known ahead
    if not cfg.tiles:
        tiles = {name: size for name, size in tiles.items() if name not in ending}
    for name, size in tiles.items():
        if name not in known:
            raise TempoError(f"tile.Config(tiles=...) names dim {name!r}, which this program does not have "
                             f"(its dims: {', '.join(sorted(known)) or 'none'})")
        if name in ending:
            raise TempoError(f"dim {name!r} ends at run time (tpo.end_when), so it cannot be cut into tiles "
                             f"of a count known before the run", sdg.nodes[ending[name]].site)
        if name in dims:  # a dim vectorized whole has no loop to tile along
            sdg = tile(sdg, dims[name], int(size))
    return sdg


# A budget-driven choice tiles a dim when one launch would read more than this share of the
# device budget of acting's output over it, in tiles that read at most the smaller share.
WHOLE_SHARE, TILE_SHARE = 1 / 4, 1 / 16


def choose_tiles(sdg: SDG, budget: int, bounds: dict, only=None) -> dict[str, int]:
    """Tile sizes for the dims whose whole reads do not fit the ``budget`` at these ``bounds``: a
    whole-program view (what the learner, fused into one launch over the dim, reads of acting's
    output: every tensor it reads whole, once) rather than one operator's size. ``only``: a
    test of each dim's plan, for the dims that may be tiled (None: every dim)."""
    out = {}
    for d in dim_order(sdg):
        extent = bounds.get(bound_of(d).name)
        if extent is None or extent < 2:
            continue
        plan = _Plan(sdg, d)
        if only is not None and not only(plan):
            continue
        rows: dict[tuple[int, int], int] = {}  # (node, output) read whole -> its bytes per row
        for n in plan.tiled | plan.aggregators:
            for e in plan.ins[n]:
                if plan.creates(e):
                    src = sdg.nodes[e.src]
                    shape = [evaluate(x, bounds) if isinstance(x, Expr) else x for x in src.shapes[e.src_out]]
                    rows[e.src, e.src_out] = math.prod(shape) * np.dtype(src.dtypes[e.src_out]).itemsize
        per_row = sum(rows.values())
        if per_row * extent > budget * WHOLE_SHARE:
            out[d.name] = max(1, min(extent, int(budget * TILE_SHARE // per_row)))
    return out


# The incrementalisation policy (TEMPO §4.3) with no budget given: a learner that can run a
# bounded number of steps behind acting is tiled as a device budget of this many bytes would
# tile it (when it reads more than a quarter of it over the whole dim, in tiles that read a
# sixteenth), so that its tiles run while acting goes on and free what they learned from.
EARLY_BUDGET = 64 * 2**20


def early_tiles(sdg: SDG, bounds: dict) -> dict[str, int]:
    """Tile sizes (as :func:`choose_tiles` with :data:`EARLY_BUDGET`) for the dims whose learner
    can run early (:func:`runs_early`): n-step returns and TD losses, not Monte-Carlo returns."""
    return choose_tiles(sdg, EARLY_BUDGET, bounds, only=runs_early)


def runs_early(plan: _Plan) -> bool:
    """Whether the tiles of ``plan`` can run while acting goes on: every tensor over the dim that
    they read whole depends on acting only a bounded number of steps ahead of the row read (an
    n-step return ``r[t:min(t + n, T)]``, not ``r[t:T]``). A tile may still wait for acting's
    end through a whole-dim result of an untiled operator (a scan over the dim, such as GAE):
    whether the schedule runs the tiles early is known once it is built, and
    ``tempo.api.compile`` drops tiles it chose this way when it does not."""
    if not plan.tiled:
        return False
    ahead = _steps_ahead(plan.sdg, plan.d)
    return all(ahead.get(e.src, math.inf) < math.inf for n in plan.tiled | plan.aggregators
               for e in plan.ins[n] if e.src not in plan.tiled and plan.creates(e))


def _steps_ahead(sdg: SDG, d: Expr) -> dict[int, float]:
    """Per node over ``d``: how many steps of ``d`` beyond its own point its value depends on
    (``inf``: unboundedly many, such as a read up to the dim's bound); a longest-path fixed point
    over the reads between nodes over ``d`` (a recurrence reads behind, so cycles do not grow)."""
    over = {n for n, node in sdg.nodes.items() if d in node.domain}
    ahead = {n: 0.0 for n in over}
    edges = [e for e in sdg.edges if e.sink in over and e.src in over]
    for _ in range(len(over) + 1):
        changed = False
        for e in edges:
            reach = _offset(e.index.args[sdg.nodes[e.src].domain.index(d)], d) + ahead[e.src]
            if reach > ahead[e.sink]:
                ahead[e.sink], changed = min(reach, math.inf), True
        if not changed:
            return ahead
    return {n: (v if v <= 0 else math.inf) for n, v in ahead.items()}


def _offset(item: Expr, d: Expr) -> float:
    """The last step of ``d`` that index ``item`` reads, minus ``d`` (``inf``: unbounded)."""
    if item.op == "slice":
        return _offset(item.args[1], d) - 1
    if item.op == "min":
        return min(_offset(a, d) for a in item.args)
    if item.op == "max":
        return max(_offset(a, d) for a in item.args)
    delta = simplify(item - d)
    if delta.is_const:
        return float(delta.value)
    if not item.free_symbols():
        return -math.inf
    return math.inf


# A read of acting's output over the whole dim whose rows (their static part) hold at least
# this many bytes is streamed in tiles even where no sum follows (observations read by a
# value function whose results feed a scan over the dim).
STREAM_MIN_BYTES = 16 * 1024

# Per op type, whether an op treats the axis as rows: a function of the op,
# its inputs' read shapes, the axis's position in each (None: the input does
# not have it and broadcasts) and its position in the output. An op type
# missing here is never tiled.
ROW_WISE: dict[type, Callable] = {}


def row_wise(*op_types: type):
    def register(fn):
        for op_type in op_types:
            ROW_WISE[op_type] = fn
        return fn

    return register


@row_wise(ops.ElementwiseOp)
def _elementwise(op, shapes, axes, out, out_rank) -> bool:
    return all(a is None or out_rank - len(s) + a == out for s, a in zip(shapes, axes))


@row_wise(ops.CastOp, ops.IdentOp)
def _same(op, shapes, axes, out, out_rank) -> bool:
    return axes[0] == out


@row_wise(ops.ReduceOp)
def _reduce(op, shapes, axes, out, out_rank) -> bool:
    (a,), rank = axes, len(shapes[0])
    reduced = {normalize_axis(x, rank) for x in op.axes}
    return a not in reduced and out == (a if op.keepdims else a - sum(1 for x in reduced if x < a))


@row_wise(ops.CumSumOp, ops.DiscountedSumOp, ops.ScanOp, ops.LinearScanOp, ops.PadOp, ops.CatOp)
def _along_another_axis(op, shapes, axes, out, out_rank) -> bool:
    a = axes[0]
    return all(x == a for x in axes if x is not None) and normalize_axis(op.axis, len(shapes[0])) != a and out == a


@row_wise(ops.SqueezeOp)
def _squeeze(op, shapes, axes, out, out_rank) -> bool:
    (a,), squeezed = axes, normalize_axis(op.axis, len(shapes[0]))
    return squeezed != a and out == a - (squeezed < a)


@row_wise(ops.UnsqueezeOp)
def _unsqueeze(op, shapes, axes, out, out_rank) -> bool:
    (a,), added = axes, normalize_axis(op.axis, len(shapes[0]) + 1)
    return out == a + (added <= a)


@row_wise(ops.PermuteOp)
def _permute(op, shapes, axes, out, out_rank) -> bool:
    return op.axes.index(axes[0]) == out


@row_wise(ops.ReshapeOp)
def _reshape(op, shapes, axes, out, out_rank) -> bool:
    (a,), (shape,) = axes, shapes
    return a == out and len(op.shape) > a and all(x is y for x, y in zip(shape[:a], op.shape[:a]))


@row_wise(ops.ExpandOp)
def _expand(op, shapes, axes, out, out_rank) -> bool:
    (a,), (shape,) = axes, shapes
    return out == (a + len(op.shape) - len(shape) if a is not None else out)  # None: expands to the axis


@row_wise(ops.SpatialIndexOp)
def _index(op, shapes, axes, out, out_rank) -> bool:
    (a,) = axes
    if a is None or len(op.items) <= a or op.items[a] is not make_slice(0, shapes[0][a]):
        return False
    return out == a - sum(1 for item in op.items[:a] if item.op != "slice")


@row_wise(ops.MatMulOp)
def _matmul(op, shapes, axes, out, out_rank) -> bool:
    (left, right), (ra, rb) = axes, (len(s) for s in shapes)
    if left is not None:  # a batch axis, or the left matrix's rows
        if ra < 2 or left == ra - 1 or out != out_rank - ra + left:
            return False
    if right is not None:  # a batch axis, or the right matrix's columns
        if rb < 2 or right == rb - 2 or out != out_rank - rb + right:
            return False
    return True


def tile(sdg: SDG, d: Expr, size: int) -> SDG:
    """``sdg`` with the axis of ``d``'s bound cut into tiles of ``size`` rows (see the module doc);
    unchanged when no sum over the axis can be tiled."""
    plan = _Plan(sdg, d)
    if not plan.tiled:
        return sdg
    return _Rewrite(sdg, d, size, plan).run()


class _Plan:
    """Which nodes are tiled (with the axis's position in each) and which sums aggregate them."""

    def __init__(self, sdg: SDG, d: Expr):
        self.sdg, self.d, self.D = sdg, d, bound_of(d)
        self.readers: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
        self.ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
        for e in sdg.edges:
            self.readers[e.src].append(e)
            self.ins[e.sink].append(e)
        for edges in self.ins.values():
            edges.sort(key=lambda e: e.sink_in)
        self.axis = {n: a for n, node in sdg.nodes.items() if (a := self._own_axis(node)) is not None}
        eligible = {n for n in self.axis if self._eligible(n)}
        aggregators = {n for n in sdg.nodes if n not in self.axis and self._aggregates(n)}
        summed = _closure({e.src for n in aggregators for e in self.ins[n]} & eligible,
                          lambda n: (e.src for e in self.ins[n]), eligible)
        streamed = _closure({n for n in eligible if any(self._streams(e) for e in self.ins[n])},
                            lambda n: (e.sink for e in self.readers[n]), eligible)
        self.tiled = summed | streamed
        self.aggregators = {n for n in aggregators if any(e.src in self.tiled for e in self.ins[n])}

    def creates(self, e: Edge) -> bool:
        """Whether ``e`` reads a tensor over the whole dim (the read that creates the axis)."""
        src = self.sdg.nodes[e.src]
        return self.d in src.domain and e.index.args[src.domain.index(self.d)] is make_slice(0, self.D)

    def _streams(self, e: Edge) -> bool:
        """Whether ``e`` reads a large tensor of acting over the whole dim (observations), which
        a tile reads a slice of at a time."""
        if not self.creates(e):
            return False
        src = self.sdg.nodes[e.src]
        static = math.prod(x for x in src.shapes[e.src_out] if isinstance(x, int))
        return static * np.dtype(src.dtypes[e.src_out]).itemsize >= STREAM_MIN_BYTES

    def _own_axis(self, node: Node) -> int | None:
        """Where the axis is in every output of ``node`` (None: nowhere, or not one place)."""
        found = {_position(shape, self.D) for shape in node.shapes}
        return found.pop() if len(found) == 1 else None

    def read_axis(self, e: Edge) -> int | None:
        """Where the axis is in what ``e`` reads (None: nowhere); -1: some way tiling cannot follow."""
        shape = self.sdg.read_shape(e)
        if e.cond is not None and _mentions(e.cond, self.D):
            return -1
        slices = [k for k, a in enumerate(e.index.args) if a.op == "slice"]
        if self.creates(e):
            at = self.sdg.nodes[e.src].domain.index(self.d)
            if _mentions(tuple(a for k, a in enumerate(e.index.args) if k != at), self.D):
                return -1
            found = slices.index(at)
            return found if _position(shape, self.D) == found else -1
        if _mentions(e.index, self.D):
            return -1
        found = _position(shape, self.D)
        return found if found is not None else (None if not _mentions(shape, self.D) else -1)

    def _aggregates(self, n: int) -> bool:
        """Whether ``n`` sums over the axis (its tiles' partial results can be summed): a sum
        over the axis, or a matrix product contracting it."""
        node, edges = self.sdg.nodes[n], self.ins[n]
        if any(e.cond is not None for e in edges) or _mentions(node.shapes, self.D):
            return False
        axes = [self.read_axis(e) for e in edges]
        ranks = [len(self.sdg.read_shape(e)) for e in edges]
        if isinstance(node.op, ops.ReduceOp):
            return (node.op.fn == "sum" and axes[0] not in (None, -1)
                    and axes[0] in {normalize_axis(a, ranks[0]) for a in node.op.axes})
        if isinstance(node.op, ops.MatMulOp):
            return axes[0] == ranks[0] - 1 and axes[1] == ranks[1] - 2 and min(ranks) >= 2
        if isinstance(node.op, ops.BatchContractOp):  # contracts every axis but m and n
            return (axes[0] not in (None, -1, ranks[0] - 2) and axes[1] not in (None, -1, ranks[1] - 1)
                    and (axes[0] == axes[1] or (axes[0] == ranks[0] - 1 and axes[1] == ranks[1] - 2)))
        return False

    def _eligible(self, n: int) -> bool:
        node = self.sdg.nodes[n]
        rule = ROW_WISE.get(type(node.op))
        if rule is None or n in self.sdg.roots or len(node.shapes) != 1:
            return False
        out = self.axis[n]
        shapes = [self.sdg.read_shape(e) for e in self.ins[n]]
        axes = [self.read_axis(e) for e in self.ins[n]]
        if -1 in axes or all(a is None for a in axes) or not self._fields_allow(node.op, out, axes):
            return False
        return rule(node.op, shapes, axes, out, len(node.shapes[0]))

    def _fields_allow(self, op: ops.Op, out: int, axes: list) -> bool:
        D = self.D
        if isinstance(op, (ops.ReshapeOp, ops.ExpandOp)):
            return len(op.shape) > out and op.shape[out] is D and not _mentions(_without(op.shape, out), D)
        if isinstance(op, ops.SpatialIndexOp):
            a = axes[0]
            return a is not None and len(op.items) > a and not _mentions(_without(op.items, a), D)
        return not _mentions(tuple(getattr(op, f.name) for f in fields(op)), D)


class _Rewrite:
    def __init__(self, sdg: SDG, d: Expr, size: int, plan: _Plan):
        self.old, self.d, self.D, self.plan = sdg, d, bound_of(d), plan
        self.step, self.bound = step_and_bound(f"{d.name}_tile")
        self.size = size
        start = self.step * size
        self.rows = make_slice(start, min_(start + size, self.D))
        self.length = size_of(self.rows.args[1] - self.rows.args[0])  # as a read of the rows measures it
        order = dim_order(sdg)
        self.before = set(order[:order.index(d)])
        self.new = SDG({}, [], sdg._next_id, dict(sdg.vectorized), sdg.roots, dict(sdg.moved),
                       {**sdg.tiles, self.bound.name: (self.D.name, size)})

    def run(self) -> SDG:
        tiled, axis = self.plan.tiled, self.plan.axis
        for n, node in self.old.nodes.items():
            if n in tiled:
                shapes = tuple(_with(s, axis[n], self.length) for s in node.shapes)
                self.new.nodes[n] = replace(node, op=self._op(node.op), domain=self._domain(node.domain),
                                            shapes=shapes)
            else:
                self.new.nodes[n] = node
        whole: dict[tuple[int, int], int] = {}
        for e in self.old.edges:
            if e.sink in tiled:
                self.new.add_edge(self._into_tile(e))
            elif e.src in tiled and e.sink not in self.plan.aggregators:
                if (e.src, e.src_out) not in whole:
                    whole[(e.src, e.src_out)] = self._untiled(self.old.nodes[e.src], e.src_out)
                self.new.add_edge(replace(e, src=whole[(e.src, e.src_out)], src_out=0))
            elif e.sink not in self.plan.aggregators:
                self.new.add_edge(e)
        for n in self.plan.aggregators:
            self._aggregate(self.old.nodes[n])
        return self.new

    def _domain(self, domain: tuple) -> tuple:
        at = sum(1 for x in domain if x in self.before)
        return (*domain[:at], self.step, *domain[at:])

    def _index(self, index: Expr, domain: tuple, item: Expr) -> Expr:
        """``index`` (over ``domain``, the untiled domain) with ``item`` at the tile dim's place."""
        at = sum(1 for x in domain if x in self.before)
        return seq(*index.args[:at], item, *index.args[at:])

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
        at = self.plan.read_axis(e)
        if at is None:  # no axis: broadcast
            return e
        if self.plan.creates(e):
            k = src.domain.index(self.d)  # the read that creates the axis reads one tile
            return replace(e, index=seq(*e.index.args[:k], self.rows, *e.index.args[k + 1:]))
        whole = self.old.read_shape(e)  # a whole operand: its tile, sliced out
        take = ops.SpatialIndexOp(tuple(make_slice(0, n) for n in whole[:at]) + (self.rows,))
        part = self.new.add_node(take, sink.domain, (_with(whole, at, self.length),), (src.dtypes[e.src_out],),
                                 sink.site, sink.label)
        if e.src in self.old.vectorized:
            self.new.vectorized[part.id] = self.old.vectorized[e.src]
        self.new.add_edge(Edge(part.id, 0, e.src, e.src_out, e.index))
        return replace(e, src=part.id, src_out=0, index=identity_index(sink.domain))

    def _aggregate(self, total: Node) -> None:
        """A sum over the axis: the same op over each tile (a partial result), accumulated over
        the tiles, and the last accumulation in the sum's place."""
        domain = self._domain(total.domain)
        partial = self.new.add_node(total.op, domain, total.shapes, total.dtypes, total.site, total.label)
        for e in self.old.in_edges(total.id):
            self.new.add_edge(self._into_tile(replace(e, sink=partial.id)))
        acc = self._accumulate(partial)
        self.new.nodes[total.id] = replace(total, op=ops.IdentOp())
        self.new.add_edge(Edge(total.id, 0, acc.id, 0, self._index(identity_index(total.domain), total.domain,
                                                                    self.bound - 1)))

    def _untiled(self, node: Node, out: int) -> int:
        """A node holding the whole of tiled ``node``'s output, for a reader that is not tiled: each
        tile padded to ``Z`` rows, the tiles read together, merged into the axis and cut to ``T``."""
        a, shape, dtype = self.plan.axis[node.id], node.shapes[out], node.dtypes[out]
        tiled = self.new.nodes[node.id]
        padded_shape = _with(shape, a, self.size)
        pad = self.new.add_node(ops.PadOp(a, const(0), self.size - self.length), tiled.domain, (padded_shape,),
                                (dtype,), node.site, node.label)
        self.new.add_edge(Edge(pad.id, 0, node.id, out, identity_index(tiled.domain)))
        rank = len(shape)  # read together: (N, ..., Z, ...); the tiles' rows first, merged, then cut
        others = _without(shape, a)
        steps = [ops.PermuteOp((0, a + 1, *(k for k in range(1, rank + 1) if k != a + 1))),
                 ops.ReshapeOp((size_of(self.bound * self.size), *others)),
                 ops.SpatialIndexOp((make_slice(0, self.D),))]
        if a:
            steps.append(ops.PermuteOp((*range(1, a + 1), 0, *range(a + 1, rank))))
        src, index = pad.id, self._index(identity_index(node.domain), node.domain, make_slice(0, self.bound))
        for op in steps:
            read = self.new.read_shape(Edge(-1, 0, src, 0, index))
            shapes, _ = infer(op, [read], [dtype])
            step = self.new.add_node(op, node.domain, shapes, (dtype,), node.site, node.label)
            self.new.add_edge(Edge(step.id, 0, src, 0, index))
            src, index = step.id, identity_index(node.domain)
        return src

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


def _closure(start: set[int], neighbours: Callable, within: set[int]) -> set[int]:
    seen, todo = set(start), list(start)
    while todo:
        for m in neighbours(todo.pop()):
            if m in within and m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _position(shape: tuple, D: Expr) -> int | None:
    """The one axis of ``shape`` whose size is ``D`` (None: none, or ``D`` appears otherwise too)."""
    at = [k for k, x in enumerate(shape) if x is D]
    if len(at) != 1 or _mentions(_without(shape, at[0]), D):
        return None
    return at[0]


def _with(shape: tuple, k: int, size) -> tuple:
    return (*shape[:k], size, *shape[k + 1:])


def _without(values: tuple, k: int) -> tuple:
    return tuple(values[:k]) + tuple(values[k + 1:])


def _mentions(values, D: Expr) -> bool:
    for v in values if isinstance(values, tuple) else (values,):
        if isinstance(v, Expr) and D in v.free_symbols():
            return True
        if isinstance(v, tuple) and _mentions(v, D):
            return True
    return False
