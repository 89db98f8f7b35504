"""An SDG open for local rewrites, shared by the simplification passes.

:class:`Graph` copies an SDG's node table and indexes each node's in-edges
(by input port) and readers, so a pass can replace a node's inputs, send a
node's readers to another value, add and remove nodes, each in time
proportional to the nodes touched; :meth:`Graph.to_sdg` gives the new SDG
(edges in their original order, new ones after). The SDG it started from
is left as it was.

A *read* is what one input of a node consumes: output ``out`` of node
``src`` at the points ``index`` (one item per source dim, over the reading
node's dims). :func:`compose` turns "a reader reads ``y`` at ``outer``, and
``y`` is the read ``inner``" into one read of ``inner``'s source, which is
how a node is bypassed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tempo.ir.ops import Op
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import same_size, size
from tempo.symbolic.expr import Expr, make_slice, seq
from tempo.symbolic.simplify import simplify


@dataclass(frozen=True)
class Read:
    """Output ``out`` of node ``src`` at ``index`` (where ``cond`` holds, for a merge's input)."""

    src: int
    out: int
    index: Expr
    cond: Expr | None = None


class Graph:
    """A mutable copy of an SDG's nodes and edges, indexed both ways."""

    def __init__(self, sdg: SDG):
        self.nodes: dict[int, Node] = dict(sdg.nodes)
        self.ins: dict[int, dict[int, Edge]] = {n: {} for n in sdg.nodes}
        self.outs: dict[int, dict[tuple[int, int], Edge]] = {n: {} for n in sdg.nodes}
        self.order: dict[tuple[int, int], int] = {}
        self.extra: list[Edge] = []  # ordering-only edges (negative input port): kept as they are
        for k, e in enumerate(sdg.edges):
            if e.sink_in < 0:
                self.extra.append(e)
                continue
            self.ins[e.sink][e.sink_in] = e
            self.outs[e.src][(e.sink, e.sink_in)] = e
            self.order[(e.sink, e.sink_in)] = k
        self.roots = dict.fromkeys(sdg.roots)  # ordered, and a set
        self.moved = dict(sdg.moved)
        self.vectorized = dict(sdg.vectorized)
        self.tiles = dict(sdg.tiles)
        self.next_id = sdg._next_id

    # ----- queries -----
    def inputs(self, n: int) -> list[Edge]:
        """``n``'s in-edges in input order."""
        return [e for _, e in sorted(self.ins[n].items())]

    def readers(self, n: int) -> list[Edge]:
        return list(self.outs[n].values())

    def read_shape(self, e: Edge | Read) -> tuple:
        src, out = (e.src, e.src_out) if isinstance(e, Edge) else (e.src, e.out)
        slices = tuple(size(a.args[1] - a.args[0]) for a in e.index.args if a.op == "slice")
        return slices + tuple(self.nodes[src].shapes[out])

    def dtype(self, e: Edge | Read) -> str:
        return self.nodes[e.src].dtypes[e.src_out if isinstance(e, Edge) else e.out]

    def is_root(self, n: int) -> bool:
        return n in self.roots

    # ----- edits -----
    def add_node(self, op: Op, domain, shapes, dtypes, like: Node | None = None) -> Node:
        node = Node(self.next_id, op, tuple(domain), tuple(shapes), tuple(dtypes),
                    like.site if like else None, like.label if like else "")
        self.next_id += 1
        self.nodes[node.id] = node
        self.ins[node.id], self.outs[node.id] = {}, {}
        return node

    def set_node(self, node: Node) -> None:
        self.nodes[node.id] = node

    def set_inputs(self, n: int, reads: list[Read]) -> None:
        """Replace every input of ``n`` by ``reads`` (port ``k`` reads ``reads[k]``)."""
        for port, e in list(self.ins[n].items()):
            del self.outs[e.src][(n, port)]
        self.ins[n] = {}
        for k, r in enumerate(reads):
            self.connect(Edge(n, k, r.src, r.out, r.index, r.cond))

    def connect(self, e: Edge) -> None:
        """Add or replace the edge into ``(e.sink, e.sink_in)``."""
        old = self.ins[e.sink].get(e.sink_in)
        if old is not None:
            del self.outs[old.src][(e.sink, e.sink_in)]
        self.ins[e.sink][e.sink_in] = e
        self.outs[e.src][(e.sink, e.sink_in)] = e

    def forward(self, n: int, out: int, to: tuple[int, int]) -> None:
        """Record that ``(to)`` now holds what output ``out`` of ``n`` held (fetches resolve through it)."""
        self.moved = {key: (to if value == (n, out) else value) for key, value in self.moved.items()}
        self.moved[(n, out)] = to
        if n in self.roots:
            self.roots = dict.fromkeys(to[0] if r == n else r for r in self.roots)

    def replace_uses(self, n: int, reads: dict[int, Read]) -> bool:
        """Send every reader of ``n``'s outputs to ``reads[out]`` (a read over ``n``'s dims) instead.

        All or nothing: False (and no change) when some reader's index cannot be
        composed, or a root would change its domain; ``n`` is then still read.
        """
        node = self.nodes[n]
        rewired = []
        for e in self.readers(n):
            read = reads.get(e.src_out)
            index = None if read is None else compose(read.index, node.domain, e.index)
            if index is None or read.cond is not None:
                return False
            rewired.append(replace(e, src=read.src, src_out=read.out, index=index))
        if self.is_root(n) and not all(self._same_point(n, r) for r in reads.values()):
            return False
        for e in rewired:
            self.connect(e)
        for out, read in reads.items():
            if self.is_root(n) or (n, out) in self.moved.values():
                self.forward(n, out, (read.src, read.out))
        return True

    def _same_point(self, n: int, read: Read) -> bool:
        """Whether ``read`` is the source's value at ``n``'s own point, over the same dims."""
        src = self.nodes[read.src]
        return (same_dims(src.domain, self.nodes[n].domain) and read.cond is None
                and all(item is d for item, d in zip(read.index.args, src.domain))
                and self.vectorized.get(read.src, ()) == self.vectorized.get(n, ()))

    def remove(self, n: int) -> None:
        """Delete ``n`` and its in-edges (it must have no readers left)."""
        assert not self.outs[n] and n not in self.roots, f"node {n} is still read"
        self.set_inputs(n, [])
        del self.nodes[n], self.ins[n], self.outs[n]
        self.vectorized.pop(n, None)

    def to_sdg(self) -> SDG:
        live = [e for ports in self.ins.values() for e in ports.values()]
        edges = sorted(live, key=lambda e: (self.order.get((e.sink, e.sink_in), len(self.order)), e.sink, e.sink_in))
        edges += [e for e in self.extra if e.sink in self.nodes and e.src in self.nodes]
        moved = {key: value for key, value in self.moved.items() if value[0] in self.nodes}
        return SDG(dict(sorted(self.nodes.items())), edges, self.next_id, self.vectorized, tuple(self.roots), moved, self.tiles)


def compose(inner: Expr, domain: tuple[Expr, ...], outer: Expr) -> Expr | None:
    """One index for "read ``y`` at ``outer``" where ``y`` (over ``domain``) is the read ``inner``.

    ``outer`` has one item per dim of ``domain``; ``inner`` one per dim of
    ``y``'s source, over ``domain``'s dims. A point of ``outer`` is
    substituted; a slice ``a:b`` of dim ``d`` becomes ``a + c:b + c`` where
    ``inner`` reads ``d + c``. None when the result would not read the same
    values in the same layout: a slice of a dim that ``inner`` ignores or
    reads other than as ``d + c``, or the slices' axes in another order
    (``outer``'s stack in front of ``inner``'s own).
    """
    points, slices = {}, {}
    for d, item in zip(domain, outer.args):
        (slices if item.op == "slice" else points)[d] = item
    items, outer_dims, inner_after = [], [], False
    for item in inner.args:
        hit = item.free_symbols() & slices.keys()
        if not hit:
            items.append(simplify(item.substitute(points)))
            inner_after = inner_after or item.op == "slice"
            continue
        if item.op == "slice" or len(hit) > 1 or inner_after:
            return None
        (d,) = hit
        shift = simplify(item - d)
        if d in shift.free_symbols():
            return None
        shift = shift.substitute(points)
        start, stop = slices[d].args
        items.append(make_slice(simplify(start + shift), simplify(stop + shift)))
        outer_dims.append(d)
    if not same_dims(tuple(outer_dims), tuple(d for d in domain if d in slices)):
        return None
    return seq(*items)


def same_dims(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def sources_first(g: Graph) -> list[int]:
    """Node ids as a stack whose pops come sources before their readers (cycles broken anywhere)."""
    order, seen = [], set()
    for start in g.nodes:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter([e.src for e in g.inputs(start)]))]
        while stack:
            n, srcs = stack[-1]
            src = next(srcs, None)
            if src is None:
                stack.pop()
                order.append(n)
            elif src not in seen:
                seen.add(src)
                stack.append((src, iter([e.src for e in g.inputs(src)])))
    return order[::-1]

