"""Which operators of a dim can run for all of its points at once: the choice half of vectorization.

:func:`whole_dim` answers for a dim with no recurrence (every node over it);
:func:`vectorizable_set` for the others, the operators outside recurrences
whose reads allow batching (see :mod:`tempo.transforms.vectorize` for the
rules and the rewrite). :func:`partially_defined` is shared with lifting:
both compute a tensor at every point of a dim at once, so neither may touch
one that lacks a value somewhere.
"""
from __future__ import annotations

from tempo.ir import ops
from tempo.ir.components import cycles
from tempo.ir.sdg import SDG, Edge, Node
from tempo.symbolic.expr import Expr, bound_of, make_slice
from tempo.symbolic.simplify import simplify


def whole_dim(sdg: SDG, d: Expr) -> frozenset[int]:
    """Every node over ``d`` when ``d`` can be vectorized whole, else nothing."""
    return frozenset(n for n, node in sdg.nodes.items() if d in node.domain) if vectorizable(sdg, d) else frozenset()


def _mentions(e: Expr | None, d: Expr) -> bool:
    return e is not None and d in e.free_symbols()


def _op_mentions(op: ops.Op, d: Expr) -> bool:
    if isinstance(op, (ops.EvalSymbolOp, ops.RandomOp)):
        return False
    if isinstance(op, ops.SpatialIndexOp):  # x[0:D].spatial[d] (autodiff's select) is fine
        return any(item is not d and _mentions(item, d) for item in op.items)
    for value in vars(op).values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Expr) and _mentions(item, d):
                return True
    return False


def vectorizable(sdg: SDG, d: Expr) -> bool:
    """No point of ``d`` depends on another (see the module docstring)."""
    whole = make_slice(0, bound_of(d))
    for node in sdg.nodes.values():
        if _op_mentions(node.op, d) or any(_mentions(s, d) for shape in node.shapes for s in shape
                                           if isinstance(s, Expr)):
            return False
    for e in sdg.edges:
        if _mentions(e.cond, d):
            return False
        src_domain = sdg.nodes[e.src].domain
        for dim, item in zip(src_domain, e.index.args):
            if dim is d:
                if item is not d and item is not whole:
                    return False
                if item is d and _selects(sdg.nodes[e.sink].op, d):
                    return False  # the point d of a tensor read at d: a diagonal, no batched rule
            elif _mentions(item, d):
                return False
    return True


def _selects(op: ops.Op, d: Expr) -> bool:
    return isinstance(op, ops.SpatialIndexOp) and any(_mentions(item, d) for item in op.items)


def vectorizable_set(sdg: SDG, d: Expr, stream: bool = False) -> frozenset[int]:
    """The nodes over ``d`` to vectorize: all of them when ``d`` is independent, else those
    outside cycles along ``d`` whose reads allow it (see the module docstring).

    ``stream``: also keep temporal what a temporal node reads at its own point, so values
    that steps read back one at a time are computed as the loop over ``d`` goes, rather
    than for all of ``d`` after it (a learner in tiles then need not wait for the whole loop).
    """
    whole = whole_dim(sdg, d)
    if whole:
        return whole
    over = {n for n, node in sdg.nodes.items() if d in node.domain}
    chosen = over - _cyclic_along(sdg, d, over) - partially_defined(sdg, d, over) - _feeding_host_code(sdg, over)
    chosen = {n for n in chosen if _own_fields_allow(sdg.nodes[n], d)}
    changed = True
    while changed:
        changed = False
        for e in sdg.edges:
            for n in _conflicts(sdg, e, d, chosen, stream):
                chosen.discard(n)
                changed = True
    return frozenset(_paying(sdg, d, chosen))


def _paying(sdg: SDG, d: Expr, chosen: set[int]) -> set[int]:
    """``chosen`` without the sources along ``d`` (a constant indexed by ``t``, a random
    draw) whose every reader loops over ``d``: each reader would select its point from the
    batched tensor, a launch per point as before, plus one."""
    readers: dict[int, list[int]] = {n: [] for n in chosen}
    fed = set()
    for e in sdg.edges:
        if e.src in chosen:
            readers[e.src].append(e.sink)
        if d in sdg.nodes[e.src].domain:
            fed.add(e.sink)
    return {n for n in chosen if n in fed or not readers[n]
            or any(r in chosen or d not in sdg.nodes[r].domain for r in readers[n])}


def _own_fields_allow(node: Node, d: Expr) -> bool:
    if isinstance(node.op, ops.UDFOp) or _op_mentions(node.op, d):
        return False
    return not any(_mentions(s, d) for shape in node.shapes for s in shape if isinstance(s, Expr))


def _conflicts(sdg: SDG, e: Edge, d: Expr, chosen: set[int], stream: bool = False) -> list[int]:
    """The ends of ``e`` that cannot stay in ``chosen`` because of how ``e`` reads."""
    src = sdg.nodes[e.src]
    items = dict(zip(src.domain, e.index.args))
    item = items.get(d)
    if any(_mentions(it, d) for dim, it in items.items() if dim is not d):
        return [n for n in (e.src, e.sink) if n in chosen]
    whole = make_slice(0, bound_of(d))
    if e.sink in chosen:
        if _mentions(e.cond, d) or (item is not None and item is not d and item is not whole):
            return [e.sink]
        if item is d and e.src not in chosen and any(_mentions(x, d) for x in src.shapes[e.src_out]
                                                     if isinstance(x, Expr)):
            return [e.sink]  # a promoted read stacks the source's points: their shapes must agree
        if item is d and _selects(sdg.nodes[e.sink].op, d):
            return [e.sink]  # selects a point of d from a tensor that is itself at d
        return []
    if e.src in chosen and item is not whole and item is not d and not _guarded_point(sdg, e, item):
        return [e.src]
    if stream and e.src in chosen and item is d and d in sdg.nodes[e.sink].domain:
        return [e.src]
    return []


def _guarded_point(sdg: SDG, e: Edge, item: Expr) -> bool:
    """A branch of a merge reading one point under a condition (``v[t + 1] if t < T - 1``):
    selecting that point from the whole tensor is safe where the branch is taken."""
    return item.op != "slice" and e.cond is not None and isinstance(sdg.nodes[e.sink].op, ops.MergeOp)


def _earlier(item: Expr, dim: Expr) -> bool:
    """Whether ``item`` reads strictly before the current point of ``dim`` (``i - 1``)."""
    if item.op == "slice":
        return False
    offset = simplify(item - dim)
    return offset.is_const and offset.value < 0


def _cyclic_along(sdg: SDG, d: Expr, over: set[int]) -> set[int]:
    """Nodes of ``over`` on a dependence cycle within one point of the dims outside ``d``
    (those before it in the domain order): a recurrence along ``d`` or along a dim inside it.
    A read of an earlier point of an outer dim (``p[i - 1]`` for ``d = t``) closes no such cycle."""
    succ: dict[int, set[int]] = {n: set() for n in over}
    for e in sdg.edges:
        if e.src in over and e.sink in over:
            src, sink = sdg.nodes[e.src], sdg.nodes[e.sink]
            outer = src.domain[:src.domain.index(d)]
            if not any(_earlier(item, dim) for dim, item in zip(src.domain, e.index.args)
                       if dim in outer and dim in sink.domain):
                succ[e.src].add(e.sink)
    return {n for component in cycles(succ) for n in component}


def _feeding_host_code(sdg: SDG, over: set[int]) -> set[int]:
    """UDFs over ``d`` and what they read within ``d`` (transitively). A sink or an
    environment step runs at each point as the program goes; batching what it reads
    would hold it back until the whole loop had run."""
    feeding = {n for n in over if isinstance(sdg.nodes[n].op, ops.UDFOp)}
    stack = list(feeding)
    while stack:
        for e in sdg.in_edges(stack.pop()):
            if e.src in over and e.src not in feeding:
                feeding.add(e.src)
                stack.append(e.src)
    return feeding


def partially_defined(sdg: SDG, d: Expr, over: set[int]) -> set[int]:
    """Nodes that may lack a value at some point of ``d``, and what reads them: conditional
    tensors (``x[t % 2 == 0]``) and reads of another point (``v[t + 1]``, undefined at
    ``t = T - 1``) outside a placeholder's branch. Computing them for all of ``d`` at once
    would read the missing points. A placeholder is defined everywhere (a gap is an error)."""
    def shifted(e: Edge) -> bool:
        src = sdg.nodes[e.src]
        item = dict(zip(src.domain, e.index.args)).get(d)
        return item is not None and item is not d and item.op != "slice" and _mentions(item, d)

    partial = set()
    for n in over:
        node = sdg.nodes[n]
        if isinstance(node.op, ops.MergeOp):
            if not node.op.placeholder and any(_mentions(e.cond, d) for e in sdg.in_edges(n)):
                partial.add(n)
        elif any(shifted(e) for e in sdg.in_edges(n)):
            partial.add(n)
    changed = bool(partial)
    while changed:
        changed = False
        for e in sdg.edges:
            sink = sdg.nodes[e.sink]
            placeholder = isinstance(sink.op, ops.MergeOp) and sink.op.placeholder
            if e.src in partial and e.sink in over and e.sink not in partial and not placeholder:
                partial.add(e.sink)
                changed = True
    return partial
