"""Fusion (TEMPO §4.3, TimeRL §5.3): static islands become one op each.

A static island is a set of nodes that run at the same points and read each
other only there: a chain of matmuls and activations inside one step of an
RL loop, say. Each island becomes one :class:`~tempo.ir.ops.FusedOp`, so the
executor launches it once per point instead of once per op, and the values
passed inside it are never stored.

Two nodes fuse when one reads the other at the same point (an identity edge
with no condition) and both have the same domain and the same executed points
(from the isl analysis). Merges (control flow) and UDFs (host code) never
fuse. The members whose values leave an island share their vectorized dims
(the fused node's outputs have one layout); members read only inside it may
differ: a learner's batch of per-point gradients and the contraction that
sums it away are one island, so the batch is never stored. An island must
stay schedulable: its members read each other only at the same point, and
no path that leaves the island comes back to it at a point that may be the
same. A path that comes
back at a lexicographically earlier point, in one order of the island's dims
for all such paths, is fine: ``h[t - 1]`` (the recurrence), ``i - 1`` with
any ``t`` (a parameter update between iterations), ``(i // K) * K`` and then
``i - 1``, or ``t + 1`` with any ``l`` (a decoder's next token into its first
layer; earlier in the order ``(t, l)``). Where an index is not a constant
offset, isl decides whether it reads at most the current step or strictly
before it. A path that may come back at the same point or a later
one is not fine: through a read of a later step (``r[t:T]``), or through a
node without one of the island's dims before it moved back along an outer
one.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable

import islpy as isl

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.schedule import isl_domains
from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify

UNFUSABLE = (ops.MergeOp, ops.UDFOp)

# Where a path lands along one dim, relative to where it left: at the same
# coordinate, at most there, strictly before, or anywhere. Following two edges
# lands at the larger of their two (per dim).
SAME, AT_MOST, EARLIER, ANY = 0, 1, 2, 3


@dataclass(frozen=True)
class Config:
    """Fusion has no options: an island is as large as the rules above allow."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every static island of two or more nodes folded into a FusedOp."""
    roots = list(sdg.roots) or list(sdg.nodes)
    moves = Moves(sdg, isl_domains.analyse(sdg, roots))
    islands = [m for m in _islands(sdg, moves) if len(m) > 1]
    return _rebuild(sdg, islands) if islands else sdg


def fusable(node: Node) -> bool:
    """Whether ``node``'s op may join an island (constants indexed by the point may not)."""
    if isinstance(node.op, UNFUSABLE):
        return False
    return not (isinstance(node.op, ops.ConstOp) and node.op.num_domain_axes)


def _same_dims(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _identity(e: Edge, src: Node) -> bool:
    return e.cond is None and len(e.index.args) == len(src.domain) and all(
        item is d for item, d in zip(e.index.args, src.domain))


def _joinable(sdg: SDG, e: Edge) -> bool:
    src, sink = sdg.nodes[e.src], sdg.nodes[e.sink]
    return fusable(src) and fusable(sink) and _same_dims(src.domain, sink.domain) and _identity(e, src)


class Moves:
    """Where each edge's sink reads its source, per dim (SAME, AT_MOST, EARLIER, ANY).

    Constant offsets are read off the index; anything else (``(i // K) * K``,
    ``max(t - 1, 0)``, a slice ``0:t + 1``) is asked of isl, over the points
    where the sink runs and the edge is active.
    """

    def __init__(self, sdg: SDG, domains: isl_domains.Domains):
        self.sdg, self.domains = sdg, domains
        self.position = {id(e): k for k, e in enumerate(sdg.edges)}
        self.cache: dict[tuple, tuple[int, ...]] = {}

    def of(self, e: Edge, dims: tuple[Expr, ...]) -> tuple[int, ...]:
        key = (id(e), dims)
        if key not in self.cache:
            self.cache[key] = tuple(self._along(e, d) for d in dims)
        return self.cache[key]

    def _along(self, e: Edge, d: Expr) -> int:
        src, sink = self.sdg.nodes[e.src], self.sdg.nodes[e.sink]
        if not any(x is d for x in src.domain) or not any(x is d for x in sink.domain):
            return ANY
        item = e.index.args[next(k for k, x in enumerate(src.domain) if x is d)]
        if item is d:
            return SAME
        if item.op != "slice":
            offset = simplify(item - d)
            if offset.is_const:
                return SAME if offset.value == 0 else EARLIER if offset.value < 0 else ANY
        k = self.position[id(e)]
        reads = self.domains.reads[k].intersect_domain(
            self.domains.executed[e.sink].intersect(self.domains.active[k]))
        space = reads.get_space()
        later_or_same = isl.Constraint.ineq_from_names(space, {f"{d.name}__src": 1, d.name: -1})
        if reads.add_constraint(later_or_same).is_empty():
            return EARLIER
        later = isl.Constraint.ineq_from_names(space, {f"{d.name}__src": 1, d.name: -1, 1: -1})
        return AT_MOST if reads.add_constraint(later).is_empty() else ANY


def _adjacency(sdg: SDG) -> tuple[dict[int, list[Edge]], dict[int, list[Edge]]]:
    """Each node's in-edges (in input order) and out-edges."""
    return {n: sdg.in_edges(n) for n in sdg.nodes}, {n: sdg.out_edges(n) for n in sdg.nodes}


# ----- which nodes form islands -----
def _islands(sdg: SDG, moves: Moves) -> list[list[int]]:
    parent = {n: n for n in sdg.nodes}
    members = {n: [n] for n in sdg.nodes}
    _, outs = _adjacency(sdg)
    island_outs = {n: list(edges) for n, edges in outs.items()}  # by island root: its members' out-edges
    points = {n: moves.domains.executed[n].reset_tuple_id() for n in sdg.nodes}
    hazards: dict[tuple, list[set[int]]] = {}  # dims -> per dim, see _hazards

    def find(n: int) -> int:
        return _root(parent, n)

    def group(n: int) -> tuple[int, list[Edge]]:
        root = find(n)
        return root, island_outs[root]

    def join(a: int, b: int) -> None:
        parent[b] = a
        members[a] = members[a] + members.pop(b)
        island_outs[a] = island_outs[a] + island_outs.pop(b)

    def try_join(nodes: list[int], dims: tuple[Expr, ...]) -> bool:
        if not _one_layout_out(sdg, nodes, outs):
            return False
        for order in _orders(dims):
            if order not in hazards:
                hazards[order] = _hazards(sdg, order, moves)
            if _schedulable(sdg, set(nodes), outs, order, moves, group, hazards[order]):
                return True
        return False

    candidates = [e for e in sdg.edges if _joinable(sdg, e) and points[e.src].is_equal(points[e.sink])]
    # first each whole connected set of candidates at once (one check, usually enough) ...
    linked = {n: n for n in sdg.nodes}
    for e in candidates:
        linked[_root(linked, e.sink)] = _root(linked, e.src)
    whole: dict[int, list[int]] = {}
    for n in sdg.nodes:
        whole.setdefault(_root(linked, n), []).append(n)
    for nodes in whole.values():
        if len(nodes) > 1 and try_join(nodes, sdg.nodes[nodes[0]].domain):
            for n in nodes[1:]:
                join(nodes[0], n)
    # ... then, where that failed, edge by edge
    for e in candidates:
        a, b = find(e.src), find(e.sink)
        if a != b and try_join(members[a] + members[b], sdg.nodes[e.src].domain):
            join(a, b)
    return [sorted(m) for m in members.values()]


def _one_layout_out(sdg: SDG, nodes: list[int], outs: dict[int, list[Edge]]) -> bool:
    """Whether the members whose values leave the island share their vectorized dims: those are the
    fused node's, so its outputs have one layout. Members read only inside may differ (a batch of
    per-point gradients vectorized over ``(t, b)`` feeding the contraction that sums them away)."""
    members, roots = set(nodes), set(sdg.roots)
    layouts = {sdg.vectorized.get(n, ()) for n in nodes
               if n in roots or any(e.sink not in members for e in outs[n])}
    return len(layouts) <= 1


def _orders(dims: tuple[Expr, ...]) -> list[tuple[Expr, ...]]:
    """The orders of an island's dims to compare points in, the domain's first: any one in
    which every path back to the island lands earlier keeps the program schedulable."""
    return [dims] + [order for order in itertools.permutations(dims)
                     if any(a is not b for a, b in zip(order, dims))]


def _root(parent: dict[int, int], n: int) -> int:
    """Union-find: the root of ``n``'s set, halving the path on the way."""
    while parent[n] != n:
        parent[n] = parent[parent[n]]
        n = parent[n]
    return n


def _schedulable(sdg: SDG, island: set[int], outs: dict[int, list[Edge]], dims: tuple[Expr, ...], moves: Moves,
                 group: Callable[[int], tuple[int, list[Edge]]] | None = None,
                 hazards: list[set[int]] | None = None) -> bool:
    """Members read each other only at the same point, and every path that leaves the
    island comes back to it at a lexicographically earlier point.

    ``group(n)``: a key for the island ``n`` already belongs to and its members'
    out-edges; they run with ``n`` at each of its points, so a path reaching one
    goes on from all. ``hazards`` (see :func:`_hazards`) lets a path that is
    already earlier stop where it cannot become anything else.
    """
    group = group or (lambda n: (n, outs[n]))
    hazards = _hazards(sdg, dims, moves) if hazards is None else hazards
    same = (SAME,) * len(dims)
    stack = []
    for m in island:
        for e in outs[m]:
            if e.sink in island:
                if not _identity(e, sdg.nodes[m]):
                    return False
            else:
                stack.append((e.sink, moves.of(e, dims)))
    seen = set()
    while stack:
        n, where = stack.pop()
        first = _first_move(where)
        if first is not None and where[first] == EARLIER and n not in hazards[first]:
            continue
        key, edges = group(n)
        if (key, where) in seen:
            continue
        seen.add((key, where))
        for e in edges:
            moved = moves.of(e, dims)
            then = where if moved == same else tuple(map(max, where, moved))
            if e.sink in island:
                if not _earlier(then):
                    return False
            else:
                stack.append((e.sink, then))
    return True


def _first_move(where: tuple[int, ...]) -> int | None:
    """The outermost dim along which the path surely moved (EARLIER or ANY)."""
    return next((k for k, w in enumerate(where) if w > AT_MOST), None)


def _earlier(where: tuple[int, ...]) -> bool:
    """Whether a path landing ``where`` (per dim, outermost first) lands lexicographically
    earlier: the first dim it surely moved along, it moved back."""
    first = _first_move(where)
    return first is not None and where[first] == EARLIER


def _hazards(sdg: SDG, dims: tuple[Expr, ...], moves: Moves) -> list[set[int]]:
    """Per dim ``k`` of ``dims``: the nodes from which a path may cross an edge that
    reads anywhere along one of ``dims[:k + 1]``.

    A path that has moved back along dim ``k`` (and not surely along an outer
    one) lands lexicographically earlier unless it later crosses such an edge;
    from a node outside this set it never does. Reachability runs backwards
    over the edges, and both ways over every identity edge two fusable nodes
    share (they may end up in one island, which a path may enter at one
    member and leave from another).
    """
    back: dict[int, list[int]] = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        back[e.sink].append(e.src)
        if _joinable(sdg, e):
            back[e.src].append(e.sink)

    def reaching(targets: set[int]) -> set[int]:
        reached, stack = set(targets), list(targets)
        while stack:
            for m in back[stack.pop()]:
                if m not in reached:
                    reached.add(m)
                    stack.append(m)
        return reached

    # only an edge after which the path can still reach a node that may join such an island
    returning = reaching({n for n, node in sdg.nodes.items() if fusable(node) and _same_dims(node.domain, dims)})
    return [reaching({e.src for e in sdg.edges if e.sink in returning and ANY in moves.of(e, dims)[:k + 1]})
            for k in range(len(dims))]


# ----- the rewrite -----
def _rebuild(sdg: SDG, islands: list[list[int]]) -> SDG:
    new = SDG({}, [], sdg._next_id, dict(sdg.vectorized), (), dict(sdg.moved), dict(sdg.tiles))
    island_of = {m: k for k, island in enumerate(islands) for m in island}
    ins, outs = _adjacency(sdg)
    fused, in_edges, moved = {}, {}, {}
    for k, island in enumerate(islands):
        node, reads, exposed = _fuse(sdg, island, ins, outs, new._next_id)
        new._next_id += 1
        fused[k], in_edges[node.id] = node, reads
        for j, key in enumerate(exposed):
            moved[key] = (node.id, j)
        for m in island:
            new.vectorized.pop(m, None)
        if exposed[0][0] in sdg.vectorized:
            new.vectorized[node.id] = sdg.vectorized[exposed[0][0]]
    last = {max(island): k for k, island in enumerate(islands)}
    for n, node in sdg.nodes.items():
        if n in last:
            new.nodes[fused[last[n]].id] = fused[last[n]]
        elif n not in island_of:
            new.nodes[n] = node

    def source(src: int, out: int) -> tuple[int, int]:
        return moved.get((src, out), (src, out))

    for e in sdg.edges:
        if e.sink not in island_of:
            src, out = source(e.src, e.src_out)
            new.add_edge(Edge(e.sink, e.sink_in, src, out, e.index, e.cond))
    for fid, reads in in_edges.items():
        for k, (src, out, index, cond) in enumerate(reads):
            new.add_edge(Edge(fid, k, *source(src, out), index, cond))
    new.moved = {key: moved.get(value, value) for key, value in new.moved.items()}
    new.moved.update(moved)
    new.roots = tuple(dict.fromkeys(moved[(n, 0)][0] if (n, 0) in moved else n for n in sdg.roots))
    return new


def _fuse(sdg: SDG, island: list[int], ins: dict[int, list[Edge]], outs: dict[int, list[Edge]], node_id: int):
    """The FusedOp node for ``island``, its reads ``(src, out, index, cond)`` and the
    ``(member, output)`` pairs it exposes, in the order of its outputs."""
    members = set(island)
    order = _topological(island, ins)
    position = {m: j for j, m in enumerate(order)}
    reads: dict[tuple, int] = {}
    steps = []
    for m in order:
        inputs = []
        for e in ins[m]:
            if e.src in members:
                inputs.append((position[e.src], e.src_out))
            else:
                key = (e.src, e.src_out, e.index, e.cond)
                inputs.append((-1, reads.setdefault(key, len(reads))))
        node = sdg.nodes[m]
        steps.append(ops.FusedStep(node.op, tuple(inputs), node.dtypes, node.site, node.label, node.shapes))
    roots = set(sdg.roots)
    exposed = [(m, out) for m in order for out in range(len(sdg.nodes[m].shapes))
               if m in roots or any(e.src_out == out and e.sink not in members for e in outs[m])]
    if not exposed:  # an island nobody reads still computes its last step's value
        exposed = [(order[-1], 0)]
    first, last = sdg.nodes[order[0]], sdg.nodes[order[-1]]
    labels = [sdg.nodes[m].label for m, _ in exposed if sdg.nodes[m].label]
    node = Node(node_id, ops.FusedOp(tuple(steps), tuple((position[m], out) for m, out in exposed)),
                first.domain, tuple(sdg.nodes[m].shapes[out] for m, out in exposed),
                tuple(sdg.nodes[m].dtypes[out] for m, out in exposed), last.site, ",".join(labels))
    return node, list(reads), exposed


def _topological(island: list[int], ins: dict[int, list[Edge]]) -> list[int]:
    """The island's members, each after the members it reads (Kahn's algorithm), the earliest
    built first among those ready: the program's own order, so that a chain written to finish
    before the next starts (a prefill's attention block by block) runs that way and its values
    die before the next chain's are made."""
    members = set(island)
    waiting = {m: {e.src for e in ins[m] if e.src in members} for m in island}
    readers: dict[int, list[int]] = {m: [] for m in island}
    for m, srcs in waiting.items():
        for s in srcs:
            readers[s].append(m)
    ready = [m for m in island if not waiting[m]]
    heapq.heapify(ready)
    order = []
    while ready:
        m = heapq.heappop(ready)
        order.append(m)
        for r in readers[m]:
            waiting[r].discard(m)
            if not waiting[r]:
                heapq.heappush(ready, r)
    return order
