"""Symbolic reverse-mode automatic differentiation over recurrent tensors (TEMPO §3).

``loss.backward()`` adds, for every floating-point RT the loss depends on, a
gradient RT with the same shape, dtype and domain. Each point of the loss is
its own loss (seeded with 1). For a read ``y[p] = f(x[phi(p)])`` the gradient
of ``x`` at a source point ``q`` sums the contributions of every sink point
that read it, found by inverting ``phi`` exactly:

* a dim the source shares with the sink inverts ``phi`` on that dim
  (``t - 1`` becomes ``t + 1`` where ``t + 1 < T``; ``t:T`` becomes ``0:t + 1``);
* a sink dim the source lacks (a broadcast) sums over all of its points;
* a source dim the sink lacks was read at a constant point or slice: only
  that point (or the points of that slice) get a gradient.

Where ``phi`` is a slice, the read added a leading axis; the contribution is
zero-padded so that axis is indexed by the absolute source point, then
selected at ``q``. Gradients are placeholders, defined once every
contribution is known, so recurrences (cycles through MergeOps) need no
special order. Parameters (``ctx.parameters``) are leaves: no gradient flows
through their update into earlier iterations.
"""
from __future__ import annotations

from dataclasses import replace

from tempo.api import functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.api.rt import apply, materialize, steps_in
from tempo.api.vjp import VJPCall, is_float, pad, rule_for, where_else_zeros
from tempo.errors import DomainError, ShapeError, TempoError, user_site
from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node, identity_index
from tempo.schedule import isl_domains
from tempo.schedule.isl_schedule import set_condition
from tempo.symbolic.expr import Expr, bound_of, logical_and, make_slice, seq
from tempo.symbolic.inversion import invert
from tempo.symbolic.simplify import simplify

_LEAVES = (ops.ConstOp, ops.EvalSymbolOp, ops.RandomOp, ops.UDFOp)


def backward(loss: RT) -> None:
    """Add gradient RTs for everything ``loss`` depends on (see the module docstring)."""
    site = user_site()
    ctx = loss.ctx
    if loss.shape != ():
        raise ShapeError(f"backward() needs a loss of spatial shape (), not {loss.shape}; reduce it "
                         f"first (e.g. loss.sum() or loss.mean())", site)
    if not is_float(loss.dtype):
        raise TempoError(f"backward() needs a floating-point loss, not {loss.dtype}", site)
    if ctx.grads:
        raise TempoError("backward() was already called in this context; add the losses and call "
                         "it once", site)
    loss = materialize(loss, site)
    sdg = ctx.sdg
    active = _active(ctx, loss.node.id)
    inner = sorted(n for n in {n for n, _ in active}
                   if n not in ctx.parameters and not isinstance(sdg.nodes[n].op, _LEAVES))
    executed = _executed_conditions(ctx, loss.node.id, inner)
    grads = {key: F.placeholder(sdg.nodes[key[0]].shapes[key[1]], sdg.nodes[key[0]].dtypes[key[1]],
                                sdg.nodes[key[0]].domain) for key in active}
    contributions: dict[tuple[int, int], list[RT]] = {key: [] for key in active}
    contributions[(loss.node.id, loss.out)].append(F.ones((), loss.dtype))
    for n in inner:
        _differentiate(ctx, sdg.nodes[n], grads, active, contributions, executed.get(n))
    for key, grad in grads.items():
        node = sdg.nodes[key[0]]
        parts = contributions[key]
        total = parts[0] if parts else F.zeros(node.shapes[key[1]], node.dtypes[key[1]])
        for part in parts[1:]:
            total = total + part
        total = _on_domain(total.cast(node.dtypes[key[1]]), node.domain)
        sdg.add_edge(Edge(grad.node.id, 0, total.node.id, total.out, total.index_expr()))
        ctx.grads[key] = grad


def _active(ctx, root: int) -> set[tuple[int, int]]:
    """Float outputs the root depends on differentiably.

    The walk stops at parameters and leaves, and at ``stop_gradient``: what is
    only read through a detached value gets no gradient, so its backward pass
    (zeros, yet full-size kernels at every point) is never built.
    """
    sdg, seen, stack = ctx.sdg, set(), [(root, 0)]
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        node = sdg.nodes[key[0]]
        if key[0] in ctx.parameters or isinstance(node.op, _LEAVES) or _stops_gradient(node.op):
            continue
        for e in sdg.in_edges(key[0]):
            if e.src in ctx.parameters:
                _check_parameter_read(sdg, e)
            if is_float(sdg.nodes[e.src].dtypes[e.src_out]):
                stack.append((e.src, e.src_out))
    return seen


def _stops_gradient(op: ops.Op) -> bool:
    return isinstance(op, ops.IdentOp) and op.stop_gradient


def _check_parameter_read(sdg: SDG, e: Edge) -> None:
    """A parameter is read at the current point of its own dims only (its value in this iteration)."""
    param = sdg.nodes[e.src]
    if e.index is not identity_index(param.domain):
        dims = ", ".join(d.name for d in param.domain)
        raise DomainError(f"parameter {param.label or param.id} varies over ({dims}) and is read here at "
                          f"[{', '.join(str(a) for a in e.index.args)}]; a parameter can only be used at "
                          f"the current point of its dims", sdg.nodes[e.sink].site)


def _executed_conditions(ctx, root: int, nodes: list[int]) -> dict[int, Expr]:
    """Where the forward pass computes each node for the loss, as a condition on its dims.

    Only those points contribute gradients: elsewhere a node's inputs may not
    even exist (``x[t + 1]`` at ``t = T - 1``). Nodes computed everywhere are absent.
    Parameters count as defined everywhere (their updates come later).
    """
    forward = SDG({n: replace(node, op=ops.IdentOp()) if n in ctx.parameters else node
                   for n, node in ctx.sdg.nodes.items()},
                  [e for e in ctx.sdg.edges if e.sink not in ctx.parameters])
    domains = isl_domains.analyse(forward, [root])
    symbols = {s.name: s for d in ctx.dim_order for s in (d, bound_of(d))}
    out = {}
    for n in nodes:
        if not domains.executed[n].is_equal(domains.box[n]):
            out[n] = simplify(set_condition(domains.executed[n], domains.box[n], symbols))
    return out


def _differentiate(ctx, node: Node, grads, active, contributions, executed: Expr | None) -> None:
    sdg = ctx.sdg
    edges = sdg.in_edges(node.id)
    call = VJPCall(node, edges,
                   [RT(ctx, sdg.nodes[e.src], e.src_out, e.index) for e in edges],
                   [RT(ctx, node, j) for j in range(len(node.shapes))],
                   [grads.get((node.id, j)) for j in range(len(node.shapes))])
    try:
        input_grads = rule_for(node.op)(call)
        for e, g in zip(edges, input_grads):
            if g is None or (e.src, e.src_out) not in active:
                continue
            if executed is not None:
                g = where_else_zeros(node.domain, _on_domain(g, node.domain), identity_index(node.domain), executed)
            contributions[(e.src, e.src_out)].append(_accumulate(ctx, g, e, node, sdg.nodes[e.src]))
    except TempoError as err:
        raise type(err)(f"differentiating this tensor: {err.problem}", node.site) from None


def _on_domain(x: RT, domain: tuple) -> RT:
    """``x`` as a node over exactly ``domain`` (an IdentOp broadcasts it over missing dims)."""
    if x.access is None and tuple(x.domain) == tuple(domain):
        return x
    ctx = x.ctx
    node = ctx.sdg.add_node(ops.IdentOp(), domain, (x.shape,), (x.dtype,), user_site())
    ctx.sdg.add_edge(Edge(node.id, 0, x.node.id, x.out, x.index_expr()))
    return RT(ctx, node)


def _accumulate(ctx, contrib: RT, edge: Edge, sink: Node, src: Node) -> RT:
    """Sum, at each point of ``src``, the contributions of the sink points that read it."""
    contrib = _on_domain(contrib, sink.domain)
    phis = dict(zip(src.domain, edge.index.args))
    selected, axis = [], 0
    for s in src.domain:
        if phis[s].op == "slice":
            start, stop = phis[s].args
            if not (start.is_const and start.value == 0 and simplify(stop - bound_of(s)).is_const
                    and simplify(stop - bound_of(s)).value == 0):
                contrib = pad(contrib, axis, start, bound_of(s) - stop)
            selected.append(s)
            axis += 1
    items, conds = [], []
    for k in sink.domain:
        if k in phis:
            _check_own_dim(phis[k], k, edge, sink)
            inverse = invert(phis[k], k)
            items.append(inverse.index)
            conds.append(inverse.condition)
        else:
            items.append(make_slice(0, bound_of(k)))
    for s in src.domain:
        if s not in sink.domain:
            phi = phis[s]
            _check_own_dim(phi, s, edge, sink)
            conds.append((phi.args[0] <= s) & (s < phi.args[1]) if phi.op == "slice" else Expr("eq", (s, phi)))
    contrib = materialize(contrib)
    index, cond = seq(*items), simplify(logical_and(*conds)) if conds else None
    if cond is None or (cond.is_const and cond.value):
        read = RT(ctx, contrib.node, contrib.out, index)
    else:
        read = where_else_zeros(src.domain, contrib, index, cond)
    stacked = sum(1 for item in items if item.op == "slice")
    if selected:
        keep = tuple(make_slice(0, n) for n in read.shape[:stacked])
        read = apply(ops.SpatialIndexOp(keep + tuple(selected)), [read])
    if stacked:
        read = F.sum(read, axis=tuple(range(stacked)))
    return read


def _check_own_dim(phi: Expr, dim: Expr, edge: Edge, sink: Node) -> None:
    foreign = steps_in(phi) - {dim}
    if foreign:
        raise TempoError(f"cannot differentiate the read [{edge.index}]: the index for dim {dim.name} "
                         f"uses {', '.join(sorted(s.name for s in foreign))}", sink.site)


def grad_of(x: RT) -> RT:
    """``x.grad``: the gradient RT of ``x`` (through ``x``'s temporal access, if any)."""
    grad = x.ctx.grads.get((x.node.id, x.out))
    if grad is None:
        why = "call loss.backward() first" if not x.ctx.grads else "the loss does not depend on it"
        raise TempoError(f"{x!r} has no gradient: {why}", user_site())
    return grad if x.access is None else RT(x.ctx, grad.node, grad.out, x.access)
