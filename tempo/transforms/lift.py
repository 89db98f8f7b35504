"""Lifting (TEMPO §4.1, Fig. 9-10): a reduction over a growing slice becomes one scan.

``x[0:t+1].sum()`` at every ``t`` reads ``t + 1`` points and sums them: ``T``
launches doing ``O(T^2)`` work in all, and a stack of a growing slice each
time. Lifted, it is one cumulative sum of the whole ``x[0:T]``, computed
once, and each ``t`` selects its entry. The same holds for the suffix
``x[t:T].sum()`` (a reverse cumulative sum) and for discounted returns
``r[t:T].discounted_sum(gamma)`` (a reverse scan ``g[t] = r[t] + gamma *
g[t + 1]``), which REINFORCE computes at every step, and for a window of
constant width ``x[max(0, t-w+1):t+1].sum()`` (one stencil over the whole
``x``: a sliding-window sum, the same work in one launch).

A mean is lifted as a sum divided by the slice's length (``t + 1``,
``T - t``, ``min(t + 1, w)``), evaluated from the slice's bounds.

A node is lifted when it is a sum or a mean over axis 0 and maybe others (or a
discounted sum over axis 0, for a suffix) of one read whose index on a dim
``d`` is ``0:d+1``, ``d:D`` or ``max(0, d-w+1):d+1``, whose other items are points that do not
mention ``d``, with no condition, from a source whose shape does not vary
over ``d`` and that is defined at every point of ``d`` (the scan reads them
all). The scan node runs over the reader's dims without ``d``; the reader
becomes a select of its point (which vectorization can then batch).

Recurrences written with a placeholder are lifted the same way when they
are a first-order linear recurrence, ``p[t] = x[t] + a[t] * p[t + 1]`` from
``p[T - 1] = x[T - 1]`` (GAE's advantages; or forward from ``p[0]``): one
``LinearScanOp`` of the whole ``x`` and ``a``; and when they shift a tensor
by one step, ``p[t] = v[t + 1]`` with ``p[T - 1] = fill`` (GAE's next value,
the alive mask): one concatenation of ``v[1:T]`` and the fill.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node, identity_index
from tempo.ir.shapes import infer
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr, bound_of, make_slice, seq
from tempo.symbolic.simplify import simplify
from tempo.transforms.batchable import partially_defined


@dataclass(frozen=True)
class Config:
    """Lifting has no options: every reduction that matches is lifted."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each reduction over a prefix or suffix slice turned into a scan and a select."""
    ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        ins[e.sink].append(e)
    lifts = {n: found for n, node in sdg.nodes.items() if (found := _match(sdg, node, ins[n])) is not None}
    facts = _Facts(sdg)
    lifts = {n: found for n, found in lifts.items() if found[0].src not in facts.partial(found[1])
             and not facts.reaches(n, {found[0].src}, found[1])}  # a reduction inside a recurrence stays
    recurrences = {n: found for n, node in sdg.nodes.items()
                   if (found := _recurrence(sdg, node, ins, facts)) is not None}
    shifts = {n: found for n, node in sdg.nodes.items() if (found := _shift(sdg, node, ins, facts)) is not None}
    rewritten = set(lifts) | set(recurrences) | set(shifts)
    if not rewritten:
        return sdg
    new = SDG(dict(sdg.nodes), [e for e in sdg.edges if e.sink not in rewritten],
              sdg._next_id, dict(sdg.vectorized), sdg.roots, dict(sdg.moved), dict(sdg.tiles))
    for n, (edge, d, reverse, gamma, window) in lifts.items():
        _lift(new, sdg.nodes[n], edge, d, ops.ScanOp(0, gamma, reverse, window))
    for n, (x, a, d, reverse) in recurrences.items():
        _lift_recurrence(new, sdg.nodes[n], x, a, d, reverse)
    for n, (x, fill, d, later) in shifts.items():
        _lift_shift(new, sdg.nodes[n], x, fill, d, later)
    return new


def _match(sdg: SDG, node: Node, edges: list[Edge]) -> tuple[Edge, Expr, bool, float, int] | None:
    """``(read, dim, reverse, gamma, window)`` when ``node`` is a liftable reduction (see the module docstring)."""
    op = node.op
    if isinstance(op, ops.ReduceOp) and op.fn in ("sum", "mean") and 0 in op.axes and not op.keepdims:
        gamma = 1.0
    elif isinstance(op, ops.DiscountedSumOp) and op.axis == 0:
        gamma = op.gamma
    else:
        return None
    if len(edges) != 1 or edges[0].cond is not None:
        return None
    e = edges[0]
    src = sdg.nodes[e.src]
    if isinstance(op, ops.ReduceOp) and op.fn == "mean" and not (src.dtypes[e.src_out] == node.dtypes[0]
                                                          and node.dtypes[0].startswith("float")):
        return None
    slices = [(dim, item) for dim, item in zip(src.domain, e.index.args) if item.op == "slice"]
    if len(slices) != 1:
        return None
    d, item = slices[0]
    if d not in node.domain or any(_mentions(s, d) for s in src.shapes[e.src_out] if isinstance(s, Expr)):
        return None
    if any(_mentions(other, d) for dim, other in zip(src.domain, e.index.args) if dim is not d):
        return None
    start, stop = item.args
    prefix = start.is_const and start.value == 0 and simplify(stop - d - 1).is_const and \
        simplify(stop - d - 1).value == 0
    suffix = start is d and simplify(stop - bound_of(d)).is_const and simplify(stop - bound_of(d)).value == 0
    if prefix and gamma == 1.0:
        return e, d, False, gamma, 0
    if suffix:
        return e, d, True, gamma, 0
    width = _window(start, stop, d)
    if width and gamma == 1.0:
        return e, d, False, gamma, width
    return None


def _window(start: Expr, stop: Expr, d: Expr) -> int:
    """``w`` when the slice is ``max(0, d - w + 1):d + 1`` (a constant-width window), else 0."""
    end = simplify(stop - d - 1)
    if not (end.is_const and end.value == 0 and start.op == "max" and len(start.args) == 2):
        return 0
    zero = [a for a in start.args if a.is_const and a.value == 0]
    lag = [simplify(d - a) for a in start.args if not (a.is_const and a.value == 0)]
    if len(zero) != 1 or len(lag) != 1 or not lag[0].is_const or lag[0].value < 0:
        return 0
    return int(lag[0].value) + 1


class _Facts:
    """What the matchers ask of the SDG, computed once per dim: where tensors may lack a value,
    and who reads whom."""

    def __init__(self, sdg: SDG):
        self.sdg, self.partials = sdg, {}
        self.succ: dict[int, list[int]] = {}
        for e in sdg.edges:
            self.succ.setdefault(e.src, []).append(e.sink)

    def partial(self, d: Expr) -> set[int]:
        """Nodes that may lack a value at some point of ``d``: a scan would read them there."""
        if d not in self.partials:
            over = {n for n, node in self.sdg.nodes.items() if d in node.domain}
            self.partials[d] = partially_defined(self.sdg, d, over)
        return self.partials[d]

    def reaches(self, target: int, nodes: set[int], d: Expr) -> bool:
        """Whether ``target`` reaches any of ``nodes`` at the same point of the other dims."""
        seen, stack = {target}, [target]
        while stack:
            for n in self.succ.get(stack.pop(), []):
                if n in nodes:
                    return True
                if n not in seen and d in self.sdg.nodes[n].domain:
                    seen.add(n)
                    stack.append(n)
        return False


def _mentions(e: Expr, d: Expr) -> bool:
    return d in e.free_symbols()


def _lift(new: SDG, node: Node, e: Edge, d: Expr, op: ops.ScanOp) -> None:
    """Add the scan ``op`` over ``e``'s source and make ``node`` select its point of it (then reduce
    the other axes of a sum or mean of all, and divide a mean by the slice's length)."""
    src = new.nodes[e.src]
    whole = seq(*(make_slice(0, bound_of(d)) if dim is d else item for dim, item in zip(src.domain, e.index.args)))
    domain = tuple(x for x in node.domain if x is not d)
    shape = (bound_of(d), *src.shapes[e.src_out])
    scan = new.add_node(op, domain, (shape,), node.dtypes, node.site, node.label)
    new.add_edge(Edge(scan.id, 0, e.src, e.src_out, whole))
    steps: list[tuple[ops.Op, list[Edge]]] = [(ops.SpatialIndexOp((d,)), [Edge(0, 0, scan.id, 0, seq(*domain))])]
    reduce = node.op if isinstance(node.op, ops.ReduceOp) else None
    rest = tuple(a - 1 for a in reduce.axes if a != 0) if reduce else ()
    here = seq(*node.domain)
    if rest:  # the other axes of a sum (or mean) of all
        steps.append((ops.ReduceOp(reduce.fn, rest), [Edge(0, 0, -1, 0, here)]))
    if reduce and reduce.fn == "mean":
        start, stop = next(item for item in e.index.args if item.op == "slice").args
        count = _add(new, ops.EvalSymbolOp(simplify(stop - start)), node.domain, [], node)
        count = _add(new, ops.CastOp(node.dtypes[0]), node.domain, [Edge(0, 0, count.id, 0, here)], node)
        steps.append((ops.ElementwiseOp("div"), [Edge(0, 0, -1, 0, here), Edge(0, 1, count.id, 0, here)]))
    previous = None
    for k, (step_op, reads) in enumerate(steps):
        reads = [replace(r, src=previous.id) if r.src < 0 else r for r in reads]
        if k < len(steps) - 1:
            previous = _add(new, step_op, node.domain, reads, node)
            continue
        new.nodes[node.id] = replace(node, op=step_op)
        for r in reads:
            new.add_edge(replace(r, sink=node.id))


# ----- recurrences written with a placeholder -----
def _recurrence(sdg: SDG, node: Node, ins: dict[int, list[Edge]],
                facts: _Facts) -> tuple[Edge, Edge, Expr, bool] | None:
    """``(x, a, d, reverse)`` when ``node`` is a placeholder ``p`` over ``d`` with two branches,
    ``p[d] = x[d]`` at the last point and ``p[d] = x[d] + a[d] * p[d + 1]`` elsewhere (reverse),
    or ``p[0] = x[0]`` and ``p[d] = x[d] + a[d] * p[d - 1]`` (forward); ``x`` and ``a`` are read
    at the current point, are defined at every point of ``d`` and do not depend on ``p`` there."""
    if not (isinstance(node.op, ops.MergeOp) and node.op.placeholder and not node.op.broadcast) \
            or len(ins[node.id]) != 2 or not node.domain:
        return None
    d = node.domain[-1]
    for base, step in (ins[node.id], ins[node.id][::-1]):
        found = _linear_step(sdg, node, step, ins, d)
        if found is None or not _identity_read(sdg, base) or base.src != found[0].src \
                or base.src_out != found[0].src_out:
            continue
        x, a, reverse = found
        if _branches_cover(base.cond, step.cond, d, reverse) and not facts.reaches(node.id, {x.src, a.src}, d):
            partial = facts.partial(d)
            if x.src not in partial and a.src not in partial:
                return x, a, d, reverse
    return None


def _identity_read(sdg: SDG, e: Edge) -> bool:
    return e.index is identity_index(sdg.nodes[e.src].domain)


def _linear_step(sdg: SDG, node: Node, step: Edge, ins, d: Expr) -> tuple[Edge, Edge, bool] | None:
    """``(x, a, reverse)`` when ``step`` reads ``x + a * p[d -+ 1]`` at the current point."""
    total = sdg.nodes[step.src]
    if not (_identity_read(sdg, step) and total.domain == node.domain and _is(total.op, "add")):
        return None
    for x, product in (ins[total.id], ins[total.id][::-1]):
        mul = sdg.nodes[product.src]
        if not (_identity_read(sdg, product) and _identity_read(sdg, x) and _is(mul.op, "mul")
                and mul.domain == node.domain and sdg.nodes[x.src].domain == node.domain
                and sdg.nodes[x.src].shapes[x.src_out] == node.shapes[0]):
            continue
        for a, p in (ins[mul.id], ins[mul.id][::-1]):
            if p.src != node.id or p.cond is not None or not _identity_read(sdg, a) \
                    or sdg.nodes[a.src].domain != node.domain or sdg.nodes[a.src].shapes[a.src_out] != node.shapes[0]:
                continue
            shift = simplify(p.index.args[-1] - d)
            others = all(item is dim for item, dim in zip(p.index.args[:-1], node.domain[:-1]))
            if others and shift.is_const and shift.value in (1, -1):
                return x, a, shift.value == 1
    return None


def _is(op: ops.Op, fn: str) -> bool:
    return isinstance(op, ops.ElementwiseOp) and op.fn == fn


def _branches_cover(base: Expr | None, step: Expr | None, d: Expr, reverse: bool) -> bool:
    """The base branch holds exactly at the point the recurrence starts from (the last point,
    reversed; else 0) and the step branch everywhere else, for every bound (checked up to 8)."""
    bound = bound_of(d)
    if base is None or step is None or not (base.free_symbols() | step.free_symbols()) <= {d, bound}:
        return False
    holds_base, holds_step = compile_expr(base), compile_expr(step)
    for size in range(1, 9):
        for k in range(size):
            env = {d.name: k, bound.name: size}
            first = k == (size - 1 if reverse else 0)
            if bool(holds_base(env)) != first or bool(holds_step(env)) == first:
                return False
    return True


def _lift_recurrence(new: SDG, node: Node, x: Edge, a: Edge, d: Expr, reverse: bool) -> None:
    """Add the linear scan of the whole ``x`` and ``a`` and make ``node`` select its point of it."""
    domain = tuple(dim for dim in node.domain if dim is not d)
    whole = seq(*(make_slice(0, bound_of(d)) if dim is d else dim for dim in node.domain))
    shape = (bound_of(d), *node.shapes[0])
    scan = new.add_node(ops.LinearScanOp(0, reverse), domain, (shape,), node.dtypes, node.site, node.label)
    new.add_edge(Edge(scan.id, 0, x.src, x.src_out, whole))
    new.add_edge(Edge(scan.id, 1, a.src, a.src_out, whole))
    new.nodes[node.id] = replace(node, op=ops.SpatialIndexOp((d,)))
    new.add_edge(Edge(node.id, 0, scan.id, 0, seq(*domain)))


# ----- a placeholder that shifts another tensor by one step -----
def _shift(sdg: SDG, node: Node, ins: dict[int, list[Edge]], facts: _Facts) -> tuple[Edge, Edge, Expr, bool] | None:
    """``(x, fill, d, later)`` when ``node`` is a placeholder ``p`` over ``d`` with two branches,
    ``p[d] = x[d + 1]`` but at the last point ``p[D - 1] = fill`` (``later``), or ``p[d] = x[d - 1]``
    but ``p[0] = fill``; ``x`` is defined at every point and does not depend on ``p``, and ``fill``
    does not vary over ``d`` (GAE's next value, the mask of steps alive)."""
    if not (isinstance(node.op, ops.MergeOp) and node.op.placeholder and not node.op.broadcast) \
            or len(ins[node.id]) != 2 or not node.domain:
        return None
    d = node.domain[-1]
    for base, step in (ins[node.id], ins[node.id][::-1]):
        x, fill = sdg.nodes[step.src], sdg.nodes[base.src]
        if d in fill.domain or fill.shapes[base.src_out] != node.shapes[0] or x.domain != node.domain \
                or x.shapes[step.src_out] != node.shapes[0] or any(item.op == "slice" for item in base.index.args):
            continue
        if not all(item is dim for item, dim in zip(step.index.args[:-1], node.domain[:-1])):
            continue
        offset = simplify(step.index.args[-1] - d)
        if not (offset.is_const and offset.value in (1, -1)):
            continue
        later = offset.value == 1
        if _branches_cover(base.cond, step.cond, d, later) and not facts.reaches(node.id, {x.id}, d) \
                and x.id not in facts.partial(d):
            return step, base, d, later
    return None


def _lift_shift(new: SDG, node: Node, x: Edge, fill: Edge, d: Expr, later: bool) -> None:
    """``node`` selects its point of ``cat(x[1:D], fill)`` (``later``) or ``cat(fill, x[0:D-1])``."""
    domain = tuple(dim for dim in node.domain if dim is not d)
    bound = bound_of(d)
    whole = seq(*(make_slice(0, bound) if dim is d else dim for dim in node.domain))
    part = _add(new, ops.SpatialIndexOp((make_slice(1, bound) if later else make_slice(0, bound - 1),)),
                domain, [Edge(0, 0, x.src, x.src_out, whole)], node)
    one = _add(new, ops.UnsqueezeOp(0), domain, [replace(fill, cond=None)], node)
    pieces = [part, one] if later else [one, part]
    joined = _add(new, ops.CatOp(0), domain, [Edge(0, 0, p.id, 0, seq(*domain)) for p in pieces], node)
    new.nodes[node.id] = replace(node, op=ops.SpatialIndexOp((d,)))
    new.add_edge(Edge(node.id, 0, joined.id, 0, seq(*domain)))


def _add(new: SDG, op: ops.Op, domain: tuple, reads: list[Edge], like: Node) -> Node:
    """A node running ``op`` over ``domain`` on ``reads`` (edges whose sink is filled in here)."""
    shapes = [new.read_shape(e) for e in reads]
    dtypes = [new.nodes[e.src].dtypes[e.src_out] for e in reads]
    out_shapes, out_dtypes = infer(op, shapes, dtypes)
    node = new.add_node(op, domain, out_shapes, out_dtypes, like.site, like.label)
    for k, e in enumerate(reads):
        new.add_edge(replace(e, sink=node.id, sink_in=k))
    return node
