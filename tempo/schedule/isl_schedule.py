"""Polyhedral scheduling with isl, and isl's AST turned into Tempo's AST.

Every edge of the SDG gives a validity constraint (the source instance runs
before the sink instance that reads it) and a proximity constraint (keep them
close, for locality and short tensor lifetimes). isl's scheduler
(``ScheduleConstraints.compute_schedule``) finds a schedule; isl's AST builder
scans it (with the deallocation statements :mod:`tempo.schedule.isl_memory` adds);
:func:`to_tempo_ast` converts the result into :mod:`tempo.schedule.ast`.
"""
from __future__ import annotations

import islpy as isl

from tempo.errors import ScheduleError
from tempo.ir.components import cycles
from tempo.ir.sdg import SDG, Edge
from tempo.schedule import isl_expr
from tempo.schedule import ast
from tempo.schedule.isl_domains import Domains, executed_reads, statement
from tempo.schedule.orderings import Nesting
from tempo.symbolic.expr import Expr, const, max_, min_, symbol


def dependences(sdg: SDG, d: Domains, nodes: set[int] | None = None) -> isl.UnionMap:
    """``src[q] -> sink[p]`` for every executed read, as one union map."""
    deps = None
    for k, e in enumerate(sdg.edges):
        if nodes is not None and not {e.sink, e.src} <= nodes:
            continue
        dep = executed_reads(sdg, d, k).intersect_range(d.executed[e.src])
        if dep.is_empty():
            continue
        dep = isl.UnionMap.from_map(dep.reverse())
        deps = dep if deps is None else deps.union(dep)
    return deps


def domain(d: Domains, nodes) -> isl.UnionSet | None:
    out = None
    for n in nodes:
        s = d.executed[n]
        if s.is_empty():
            continue
        u = isl.UnionSet.from_set(s)
        out = u if out is None else out.union(u)
    return out


def ordering_dependences(sdg: SDG, d: Domains, orderings: list[Edge]) -> isl.UnionMap | None:
    """Scheduling-only constraints: ``e.src`` at ``e.index(p)`` runs before ``e.sink`` at ``p``."""
    deps = None
    for e in orderings:
        sink, src = sdg.nodes[e.sink], sdg.nodes[e.src]
        reads = isl_expr.access_map(statement(e.sink), sink.domain, statement(e.src), src.domain, e.index,
                                    params=d.params, src_box=False)
        at = d.executed[e.sink]
        if e.cond is not None:
            at = at.intersect(isl_expr.domain_set(statement(e.sink), sink.domain, e.cond, d.params))
        dep = reads.intersect_domain(at).intersect_range(d.executed[e.src])
        if not dep.is_empty():
            dep = isl.UnionMap.from_map(dep.reverse())
            deps = dep if deps is None else deps.union(dep)
    return deps


def all_dependences(sdg: SDG, d: Domains, orderings: list[Edge] = ()) -> isl.UnionMap | None:
    """The reads' dependences and the ``orderings``' constraints, as one union map."""
    deps = dependences(sdg, d)
    extra = ordering_dependences(sdg, d, list(orderings))
    if extra is not None:
        deps = extra if deps is None else deps.union(extra)
    return deps


def compute_schedule(sdg: SDG, d: Domains, orderings: list[Edge] = (),
                     nesting: Nesting | None = None) -> isl.Schedule | None:
    """isl's schedule of all executed statements, or a ScheduleError naming a bad cycle.

    ``orderings`` add validity constraints that carry no data (see :func:`ordering_dependences`).
    ``nesting`` (:func:`tempo.schedule.orderings.nesting`) asks for one loop around every statement
    over a state's dim (:func:`nested_schedule`); where the program does not allow it, isl
    schedules the whole program.
    """
    dom = domain(d, sdg.nodes)
    if dom is None:
        return None
    if nesting is not None:
        nested = nested_schedule(sdg, d, orderings, nesting)
        if nested is not None:
            return nested
    computed = _computed(dom, all_dependences(sdg, d, orderings))
    if computed is None:
        raise _cycle_error(sdg, d)
    return computed


def nested_schedule(sdg: SDG, d: Domains, orderings: list[Edge], nesting: Nesting) -> isl.Schedule | None:
    """The schedule of :mod:`tempo.schedule.orderings`' nesting policy: the statements that run before
    the loop over ``nesting.loop`` (what it reads), the loop, whose one band is that dim for every
    statement over it, each at its own step, and the statements that read it, after it. isl
    schedules each of the three, the loop's body from the dependences between statements at the
    same step, with ``nesting.steps`` where it can meet them. None where a statement over the dim
    reads a later step of it, or the loop reads what reads the loop."""
    at = {n: k for n, node in sdg.nodes.items() if not d.executed[n].is_empty()
          for k, x in enumerate(node.domain) if x is nesting.loop}  # a statement of the loop -> the dim's axis
    deps = all_dependences(sdg, d, orderings)
    reads: dict[int, set[int]] = {n: set() for n in sdg.nodes}
    for m in _maps(deps):
        reads[_node(m, _OUT)].add(_node(m, _IN))
    inside = _between(_maps(deps), at)
    if any(not m.order_gt(_IN, at[_node(m, _IN)], _OUT, at[_node(m, _OUT)]).is_empty() for m in inside):
        return None
    after = _readers(reads, set(at)) - set(at)
    if any(reads[n] & after for n in at):
        return None
    body = [_same_step(m, at) for m in inside]
    steps = [_same_step(m, at) for m in _between(_maps(ordering_dependences(sdg, d, nesting.steps)), at)]
    loop = _computed(domain(d, at), _union(body + steps)) or _computed(domain(d, at), _union(body))
    if loop is None:
        return None
    band = _union([isl.Map.from_domain(d.executed[n]).add_dims(_OUT, 1).equate(_IN, k, _OUT, 0) for n, k in at.items()])
    out = loop.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(band)).get_root().child(0).child(0) \
        .insert_mark(isl.Id(STEP_MARK + nesting.loop.name)).get_schedule()
    before = [n for n in sdg.nodes if n not in at and n not in after]
    for nodes, first in ((before, True), (after, False)):
        dom = domain(d, nodes)
        if dom is None:
            continue
        piece = _computed(dom, None if deps is None else deps.intersect_domain(dom).intersect_range(dom))
        if piece is None:
            return None
        out = piece.sequence(out) if first else out.sequence(piece)
    return out


STEP_MARK = "step of "  # a mark inside a nested loop's band, naming its dim (see :func:`to_tempo_ast`)
_IN, _OUT = isl.dim_type.in_, isl.dim_type.out


def _between(maps: list[isl.Map], at: dict[int, int]) -> list[isl.Map]:
    """The dependences of ``maps`` from a statement of ``at`` to another."""
    return [m for m in maps if _node(m, _IN) in at and _node(m, _OUT) in at]


def _same_step(m: isl.Map, at: dict[int, int]) -> isl.Map:
    """The part of the dependence ``m`` from a step of the dim (``at``: its axis per statement) to the same step."""
    return m.equate(_IN, at[_node(m, _IN)], _OUT, at[_node(m, _OUT)])


def _maps(deps: isl.UnionMap | None) -> list[isl.Map]:
    if deps is None:
        return []
    maps = deps.get_map_list()
    return [maps.get_at(k) for k in range(maps.n_map())]


def _node(m: isl.Map, kind: isl.dim_type) -> int:
    """The node whose statement is ``m``'s domain (``kind`` in) or range (out)."""
    return int(m.get_tuple_name(kind)[1:])


def _union(maps: list[isl.Map]) -> isl.UnionMap | None:
    out = None
    for m in maps:
        u = isl.UnionMap.from_map(m)
        out = u if out is None else out.union(u)
    return out


def _readers(reads: dict[int, set[int]], of: set[int]) -> set[int]:
    """The nodes that read ``of``, transitively."""
    readers: dict[int, set[int]] = {}
    for sink, srcs in reads.items():
        for src in srcs:
            readers.setdefault(src, set()).add(sink)
    seen, todo = set(), list(of)
    while todo:
        for n in readers.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _computed(dom: isl.UnionSet, deps: isl.UnionMap | None) -> isl.Schedule | None:
    """isl's schedule of ``dom`` meeting ``deps``, or None where it finds none."""
    constraints = isl.ScheduleConstraints.on_domain(dom)
    if deps is not None:
        constraints = constraints.set_validity(deps).set_proximity(deps)
    try:
        return constraints.compute_schedule()
    except isl.Error:
        return None


def _cycle_error(sdg: SDG, d: Domains) -> ScheduleError:
    for scc in _strongly_connected(sdg, d):
        dom = domain(d, scc)
        deps = dependences(sdg, d, scc)
        if dom is None or deps is None:
            continue
        try:
            isl.ScheduleConstraints.on_domain(dom).set_validity(deps).compute_schedule()
        except isl.Error:
            names = "\n".join(f"  - {sdg.describe(n)}" for n in sorted(scc))
            return ScheduleError(f"no schedule can satisfy this cycle of dependences (each of these "
                                 f"tensors needs another one of them at the same or a later step):\n{names}")
    return ScheduleError("isl found no schedule for this program")


def _strongly_connected(sdg: SDG, d: Domains) -> list[set[int]]:
    succ: dict[int, set[int]] = {n: set() for n in sdg.nodes}
    for e in sdg.edges:
        succ[e.sink].add(e.src)
    return cycles(succ)


def as_map(schedule: isl.Schedule | isl.UnionMap) -> isl.UnionMap:
    """``schedule`` as a flat map from statement instances to times."""
    return schedule if isinstance(schedule, isl.UnionMap) else schedule.get_map()


def build_ast(sdg: SDG, d: Domains, schedule: isl.Schedule | isl.UnionMap | None,
              separate: bool = False) -> ast.Stmt:
    """The Tempo AST that scans ``schedule`` (a schedule tree, or a flat map from statements to times).

    ``separate``: TEMPO §5.3's partial unrolling, on a schedule tree. isl splits every loop of a
    band into the pieces where one set of statements runs (peeling the first or last iterations
    where a statement starts or stops), so a condition that holds on a whole piece is tested once,
    not at every iteration. The pieces repeat the statements they share: an analysis that wants
    each statement once reads the AST built without it. A flat map (shift fusion's, whose loops
    hold statements shifted against each other) is scanned atomically either way: each statement
    once."""
    if schedule is None:
        return ast.Sequence(())
    build = isl.AstBuild.from_context(d.context)
    if isinstance(schedule, isl.UnionMap):
        times = schedule.range()
        n = times.get_set_list().get_at(0).dim(isl.dim_type.set)
        names = ", ".join(f"x{k}" for k in range(n))
        options = isl.UnionMap.read_from_str(schedule.get_ctx(), f"{{ [{names}] -> atomic[k] : 0 <= k < {n} }}")
        return to_tempo_ast(build.set_options(options).node_from_schedule_map(schedule), sdg)
    if separate:
        schedule = schedule.map_schedule_node_bottom_up(_separated)
    return to_tempo_ast(build.node_from_schedule(schedule), sdg)


def _separated(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """A band node with every member's loops separated (see :func:`build_ast`); another node as it is."""
    if node.get_type() != isl.schedule_node_type.band:
        return node
    for k in range(node.band_n_member()):
        node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.separate)
    return node


def free_statement(node_id: int, outputs: tuple[int, ...] = (), piece: int = 0) -> str:
    """The isl name of (``piece`` of) the statement freeing ``node_id``'s ``outputs`` (empty: all)."""
    return "_".join([f"F{node_id}", str(piece), *map(str, outputs)])


_MOVES = {"E": ast.Evict, "L": ast.Load}


def to_tempo_ast(node: isl.AstNode, sdg: SDG, loop: str | None = None, steps: dict[str, str] | None = None) -> ast.Stmt:
    """isl's AST as Tempo's: a statement ``S<n>`` executes node ``n``, a statement ``F<n>_<piece>`` (or
    ``F<n>_<piece>_<j>...``) frees its outputs (see :func:`free_statement`), ``E<n>_<r>...`` and
    ``L<n>_<r>...`` evict and load them (see :func:`tempo.schedule.isl_swap.swap_statement`).

    ``loop`` is the innermost loop around ``node``. Below a :data:`STEP_MARK` of a dim, the loop
    around the mark runs every statement over that dim at its own step (:func:`nested_schedule`):
    its point along the dim is that loop's counter (``steps``: dim name -> counter), where isl
    would write the value a guard fixes the counter to (``I - 1`` in the branch of the last step)."""
    steps = steps or {}
    kind = node.get_type()
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        body = []
        for k in range(children.n_ast_node()):
            child = to_tempo_ast(children.get_at(k), sdg, loop, steps)
            body.extend(child.body if isinstance(child, ast.Sequence) else (child,))  # a block in a block: one
        return ast.Sequence(tuple(body))
    if kind == isl.ast_node_type.for_:
        var = node.for_get_iterator().get_id().get_name()
        step = _expr(node.for_get_inc())
        return ast.Loop(var, _expr(node.for_get_init()), _expr(node.for_get_cond()), int(step.value),
                        to_tempo_ast(node.for_get_body(), sdg, var, steps))
    if kind == isl.ast_node_type.if_:
        orelse = to_tempo_ast(node.if_get_else_node(), sdg, loop, steps) if node.if_has_else_node() else None
        return ast.If(_expr(node.if_get_cond()), to_tempo_ast(node.if_get_then_node(), sdg, loop, steps), orelse)
    if kind == isl.ast_node_type.user:
        call = node.user_get_expr()
        name = call.get_op_arg(0).get_id().get_name()
        node_id, *parts = (int(part) for part in name[1:].split("_"))
        point = tuple(_expr(call.get_op_arg(i)) for i in range(1, call.get_op_n_arg()))
        label = sdg.nodes[node_id].label or f"{sdg.nodes[node_id].op.name}%{node_id}"
        if name.startswith("F"):
            return ast.Free(node_id, point, label, tuple(parts[1:]))
        if name[0] in _MOVES:  # the moved point is the call's last arguments (a reader's point may precede it)
            point = point[len(point) - len(sdg.nodes[node_id].domain):]
            return _MOVES[name[0]](node_id, point, label, tuple(parts[1:]))
        point = tuple(symbol(steps[d.name]) if d.name in steps else p for d, p in zip(sdg.nodes[node_id].domain, point))
        return ast.Execute(node_id, point, label)
    if kind == isl.ast_node_type.mark:
        mark = node.mark_get_id().get_name()
        if mark.startswith(STEP_MARK) and loop is not None:
            steps = {**steps, mark[len(STEP_MARK):]: loop}
        return to_tempo_ast(node.mark_get_node(), sdg, loop, steps)
    raise ScheduleError(f"unexpected isl AST node {kind}")


def set_condition(points: isl.Set, box: isl.Set, symbols: dict[str, Expr]) -> Expr:
    """``points`` (a subset of ``box``) as a condition over the box's dims, simplified given the box.

    ``symbols`` maps isl dim and parameter names to the Tempo symbols they stand for.
    """
    def as_params(s: isl.Set) -> isl.Set:
        return s.move_dims(isl.dim_type.param, s.dim(isl.dim_type.param), isl.dim_type.set, 0,
                           s.dim(isl.dim_type.set)).params()

    build = isl.AstBuild.from_context(as_params(box))
    return _expr(build.expr_from_set(as_params(points).align_params(as_params(box).get_space())), symbols)


_OPS = isl.ast_expr_op_type
_BINARY = {_OPS.add: lambda a, b: a + b, _OPS.sub: lambda a, b: a - b, _OPS.mul: lambda a, b: a * b,
           _OPS.div: lambda a, b: a // b, _OPS.fdiv_q: lambda a, b: a // b,
           _OPS.pdiv_q: lambda a, b: a // b, _OPS.pdiv_r: lambda a, b: a % b,
           _OPS.zdiv_r: lambda a, b: a % b, _OPS.eq: lambda a, b: Expr("eq", (a, b)),
           _OPS.le: lambda a, b: a <= b, _OPS.lt: lambda a, b: a < b,
           _OPS.ge: lambda a, b: a >= b, _OPS.gt: lambda a, b: a > b}


def _expr(e: isl.AstExpr, symbols: dict[str, Expr] | None = None) -> Expr:
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        return const(e.get_val().to_python())
    if kind == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return symbols[name] if symbols and name in symbols else symbol(name)
    op = e.get_op_type()
    args = [_expr(e.get_op_arg(i), symbols) for i in range(e.get_op_n_arg())]
    if op == _OPS.minus:
        return -args[0]
    if op in (_OPS.max, _OPS.min):
        return (max_ if op == _OPS.max else min_)(*args)
    if op in (_OPS.and_, _OPS.and_then):
        return Expr("and", tuple(args))
    if op in (_OPS.or_, _OPS.or_else):
        return Expr("or", tuple(args))
    if op == _OPS.select or op == _OPS.cond:
        c, a, b = args
        return Expr("add", (Expr("mul", (a, c)), Expr("mul", (b, ~c))))
    if op in _BINARY:
        return _BINARY[op](*args)
    raise ScheduleError(f"unsupported isl AST expression {e.to_C_str()}")
