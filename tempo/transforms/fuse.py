"""Fusion (TEMPO §4.3, TimeRL §5.3): static islands become one op each.

A static island is a set of nodes that run at the same points and read each
other only there: a chain of matmuls and activations inside one step of an
RL loop, say. Each island becomes one :class:`~tempo.ir.ops.FusedOp`, so the
executor launches it once per point instead of once per op, and the values
passed inside it are never stored.

Two nodes fuse when one reads the other at the same point (an identity edge
with no condition) and both have the same domain, the same vectorized dims
and the same executed points (from the isl analysis). Merges (control flow)
and UDFs (host code) never fuse. An island must stay schedulable: its
members read each other only at the same point, and no path that leaves the
island comes back to it at the same point. A path through a strictly
earlier point (the recurrence ``h[t - 1]``) comes back at another point and
is fine; one through a slice or a node without the island's dims is not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.schedule import isl_domains
from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify

UNFUSABLE = (ops.MergeOp, ops.UDFOp)

SAME, EARLIER, ANY = 0, 1, 2  # where a path lands, relative to the point it left from


@dataclass(frozen=True)
class Config:
    """Fusion has no options: an island is as large as the rules above allow."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every static island of two or more nodes folded into a FusedOp."""
    roots = list(sdg.roots) or list(sdg.nodes)
    executed = isl_domains.analyse(sdg, roots).executed
    islands = [m for m in _islands(sdg, executed) if len(m) > 1]
    return _rebuild(sdg, islands) if islands else sdg


def fusable(node: Node) -> bool:
    """Whether ``node``'s op may join an island (constants indexed by the point may not)."""
    if isinstance(node.op, UNFUSABLE):
        return False
    return not (isinstance(node.op, ops.ConstOp) and node.op.num_domain_axes)


def _same_domain(a: Node, b: Node) -> bool:
    return len(a.domain) == len(b.domain) and all(x is y for x, y in zip(a.domain, b.domain))


def _identity(e: Edge, src: Node) -> bool:
    return e.cond is None and len(e.index.args) == len(src.domain) and all(
        item is d for item, d in zip(e.index.args, src.domain))


# ----- which nodes form islands -----
def _islands(sdg: SDG, executed: dict) -> list[list[int]]:
    parent = {n: n for n in sdg.nodes}
    members = {n: [n] for n in sdg.nodes}
    outs: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        outs[e.src].append(e)
    points = {n: executed[n].reset_tuple_id() for n in sdg.nodes}

    def find(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for e in sdg.edges:
        src, sink = sdg.nodes[e.src], sdg.nodes[e.sink]
        if not (fusable(src) and fusable(sink) and _same_domain(src, sink) and _identity(e, src)):
            continue
        if sdg.vectorized.get(e.src, ()) != sdg.vectorized.get(e.sink, ()):
            continue
        a, b = find(e.src), find(e.sink)
        if a == b or not points[a].is_equal(points[b]):
            continue
        joined = members[a] + members[b]
        if _schedulable(sdg, set(joined), outs, src.domain, lambda n: members[find(n)]):
            parent[b] = a
            members[a] = joined
            del members[b]
    return [sorted(m) for m in members.values()]


def _schedulable(sdg: SDG, island: set[int], outs: dict[int, list[Edge]], dims: tuple[Expr, ...],
                 together: Callable[[int], list[int]] = lambda n: [n]) -> bool:
    """Members read each other only at the same point, and no path leaves the island
    and comes back to it at a point that might be the same one.

    ``together(n)``: the nodes of the island ``n`` already belongs to, which run
    with ``n`` at each of its points; a path reaching one of them goes on from all.
    """
    stack = []
    for m in island:
        for e in outs[m]:
            if e.sink in island:
                if not _identity(e, sdg.nodes[m]):
                    return False
            else:
                stack.append((e.sink, _step(sdg, e, dims)))
    seen = set()
    while stack:
        n, where = stack.pop()
        group = together(n)
        if (group[0], where) in seen:
            continue
        seen.add((group[0], where))
        for e in (e for m in group for e in outs[m]):
            then = max(where, _step(sdg, e, dims))  # ANY wins; EARLIER beats SAME
            if e.sink in island:
                if then != EARLIER:
                    return False
            else:
                stack.append((e.sink, then))
    return True


def _step(sdg: SDG, e: Edge, dims: tuple[Expr, ...]) -> int:
    """Where edge ``e``'s sink reads its source, on the island's dims: at the same
    point, at a strictly earlier one (``<=`` on every dim, ``<`` on one), or anywhere."""
    src, sink = sdg.nodes[e.src], sdg.nodes[e.sink]
    where = SAME
    for d in dims:
        if not any(x is d for x in src.domain) or not any(x is d for x in sink.domain):
            return ANY
        item = e.index.args[next(k for k, x in enumerate(src.domain) if x is d)]
        if item is d:
            continue
        if item.op == "slice":
            return ANY
        offset = simplify(item - d)
        if not offset.is_const or offset.value > 0:
            return ANY
        if offset.value < 0:
            where = EARLIER
    return where


# ----- the rewrite -----
def _rebuild(sdg: SDG, islands: list[list[int]]) -> SDG:
    new = SDG({}, [], sdg._next_id, dict(sdg.vectorized), (), dict(sdg.moved))
    island_of = {m: k for k, island in enumerate(islands) for m in island}
    ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
    outs: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        ins[e.sink].append(e)
        outs[e.src].append(e)
    for edges in ins.values():
        edges.sort(key=lambda e: e.sink_in)
    fused, in_edges, moved = {}, {}, {}
    for k, island in enumerate(islands):
        node, reads, exposed = _fuse(sdg, island, ins, outs, new._next_id)
        new._next_id += 1
        fused[k], in_edges[node.id] = node, reads
        for j, key in enumerate(exposed):
            moved[key] = (node.id, j)
        for m in island:
            new.vectorized.pop(m, None)
        if island[0] in sdg.vectorized:
            new.vectorized[node.id] = sdg.vectorized[island[0]]
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
        steps.append(ops.FusedStep(node.op, tuple(inputs), node.dtypes, node.site, node.label))
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
    """The island's members, each after the members it reads (Kahn's algorithm)."""
    members = set(island)
    waiting = {m: {e.src for e in ins[m] if e.src in members} for m in island}
    readers: dict[int, list[int]] = {m: [] for m in island}
    for m, srcs in waiting.items():
        for s in srcs:
            readers[s].append(m)
    ready = [m for m in island if not waiting[m]]
    order = []
    while ready:
        m = ready.pop(0)
        order.append(m)
        for r in readers[m]:
            waiting[r].discard(m)
            if not waiting[r]:
                ready.append(r)
    return order
