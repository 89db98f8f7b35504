"""Which loops of the schedule run whole as one device program, and where their values come from.

A loop of the schedule AST whose body is all device code (kernel launches
of fused islands and device ops, merges, conditions and frees; no user
function, no nested loop) may run as one launch on a backend that compiles
loops. :func:`plan` decides whether a loop qualifies and classifies every
value its body reads and writes:

- a value computed in the loop and read in the same iteration is a local
  of the traced body; one read ``d`` iterations later (``x[t - 1]``) is
  carried from iteration to iteration (the last ``d`` values);
- a value computed outside the loop and read at an index that does not
  depend on the loop's counter is an input of the whole loop (read once);
  one read at an index that does (``x[i, t]`` of a tensor computed before
  the loop) is gathered before the loop, one value per iteration;
- what a statement after the loop reads (or the program fetches) is written
  back into its tensor store after the loop, a block store's rows in one
  write.

:mod:`tempo.runtime.device_loops` runs the plans.
"""
from __future__ import annotations

from dataclasses import dataclass

from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge, Node
from tempo.schedule import ast
from tempo.symbolic.affine import counter, uses
from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify

CLOSED, GATHERED, LOCAL, CARRIED = "closed", "gathered", "local", "carried"


@dataclass(frozen=True)
class Source:
    """Where one input of a statement of the loop comes from: ``kind`` is one of
    ``closed``, ``gathered`` (read from ``key``'s store at ``index``), ``local`` or
    ``carried`` (the value ``key`` took ``shift`` iterations earlier, 0 for local)."""

    kind: str
    key: tuple[int, int]
    index: Expr | None = None
    shift: int = 0
    edge: Edge | None = None


@dataclass(frozen=True)
class Step:
    """One Execute of the loop body: its node, the ``if`` conditions it runs under, and its inputs
    (a merge's branches in order, with their conditions in ``conds``)."""

    execute: ast.Execute
    node: Node
    guard: tuple[Expr, ...]
    inputs: tuple[Source, ...]
    conds: tuple[Expr | None, ...] = ()


@dataclass(frozen=True)
class LoopPlan:
    """A loop the device runs whole: its steps in body order; ``carried``: (node, output) -> how
    many past iterations' values the body reads; ``written_back``: what is stored after the loop;
    ``frees``: the loop's Free statements of stores that hold something (with their conditions)."""

    loop: ast.Loop
    steps: tuple[Step, ...]
    carried: dict
    written_back: tuple[tuple[int, int], ...]
    frees: tuple[tuple[ast.Free, tuple[Expr, ...]], ...]

    def signature(self) -> tuple:
        """What a compiled form of this loop depends on besides its AST: where each input comes from,
        what is carried and what is written back (the store choices decide them)."""
        sources = tuple((src.kind, src.key, src.shift) for step in self.steps for src in step.inputs)
        return sources, tuple(sorted(self.carried.items())), self.written_back


def plan(sdg: SDG, loop: ast.Loop, program: ast.Stmt, kinds: dict, keep, host=frozenset()) -> LoopPlan | None:
    """The plan of ``loop`` as one device program, or None when its body is not all device code
    (or is one launch, which gains nothing).

    ``kinds``: (node, output) -> store kind; ``keep``: fetched nodes; ``host``: stores a swap plan keeps
    on the host (a loop touching one is not compiled)."""
    body = _body(loop.body, ())
    if body is None or loop.step != 1:
        return None
    executes = [(s, guard) for s, guard in body if isinstance(s, ast.Execute)]
    if len(executes) < 2 or all(isinstance(sdg.nodes[s.node_id].op, MergeOp) for s, _ in executes):
        return None
    counts: dict[int, int] = {}
    for s in ast.statements(program):
        counts[s.node_id] = counts.get(s.node_id, 0) + 1
    writers = {s.node_id: (k, s) for k, (s, _) in enumerate(executes)}
    if len(writers) != len(executes) or any(counts[n] != 1 for n in writers):
        return None
    steps = []
    for order, (ex, guard) in enumerate(executes):
        node = sdg.nodes[ex.node_id]
        if isinstance(node.op, UDFOp) or not all(_static(s) for s in node.shapes):
            return None
        if any(kinds.get((node.id, j)) == "window" or (node.id, j) in host for j in range(len(node.shapes))):
            return None
        at = dict(zip(node.domain, ex.point))
        inputs, conds = [], []
        for e in sdg.in_edges(node.id):
            if e.cond is not None and not isinstance(node.op, MergeOp):
                return None
            source = _source(e, e.index.substitute(at), loop.var, writers, order, host)
            if source is None:
                return None
            inputs.append(source)
            conds.append(None if e.cond is None else e.cond.substitute(at))
        steps.append(Step(ex, node, guard, tuple(inputs), tuple(conds)))
    carried: dict[tuple[int, int], int] = {}
    for step in steps:
        for source in step.inputs:
            if source.kind == CARRIED:
                carried[source.key] = max(carried.get(source.key, 0), source.shift)
    executed = set(counts)
    written_back = tuple((n, j) for n in writers for j in range(len(sdg.nodes[n].shapes))
                         if n in keep or any(e.sink not in writers and e.sink in executed
                                             for e in sdg.edges if e.src == n and e.src_out == j))
    frees = tuple((s, guard) for s, guard in body if isinstance(s, ast.Free)
                  and (s.node_id not in writers or any(key[0] == s.node_id for key in written_back)))
    return LoopPlan(loop, tuple(steps), carried, written_back, frees)


def _body(stmt: ast.Stmt, guard: tuple):
    """The loop body's Execute and Free statements with the ``if`` conditions they run under
    (None when it holds a loop)."""
    if isinstance(stmt, ast.Sequence):
        out = []
        for s in stmt.body:
            inner = _body(s, guard)
            if inner is None:
                return None
            out += inner
        return out
    if isinstance(stmt, ast.If):
        then = _body(stmt.then, guard + (stmt.cond,))
        if then is None or stmt.orelse is not None:
            return None
        return then
    if isinstance(stmt, ast.Loop):
        return None
    return [(stmt, guard)]


def _static(shape: tuple) -> bool:
    return all(isinstance(s, int) or all(x.kind == "bound" for x in s.free_symbols()) for s in shape)


def _source(e: Edge, index: Expr, var: str, writers: dict, order: int, host) -> Source | None:
    key = (e.src, e.src_out)
    if e.src not in writers:
        if key in host:
            return None
        if not uses(index, var):
            return Source(CLOSED, key, index, edge=e)
        if any(a.op == "slice" for a in index.args):
            return None
        return Source(GATHERED, key, index, edge=e)
    writer_order, writer = writers[e.src]
    shift = _iterations_back(index, writer.point, var)
    if shift is None or shift < 0 or (shift == 0 and writer_order >= order):
        return None
    return Source(CARRIED if shift else LOCAL, key, shift=shift)


def _iterations_back(index: Expr, point: tuple, var: str) -> int | None:
    """``d`` when reading ``index`` is reading the point the writer wrote ``d`` iterations earlier."""
    if len(index.args) != len(point) or any(a.op == "slice" for a in index.args):
        return None
    moving = [(a, p) for a, p in zip(index.args, point) if uses(p, var)]
    if not moving:
        return None
    a, p = moving[0]
    v = counter(p, var)
    slope, offset = simplify(p.substitute({v: v + 1}) - p), simplify(a - p)
    if not slope.is_const or not offset.is_const or slope.value == 0 or offset.value % slope.value:
        return None
    d = -offset.value // slope.value
    for x, q in zip(index.args, point):
        target = q.substitute({v: v - d}) if uses(q, var) else q
        if not (x is target or _is_zero(simplify(x - target))):
            return None
    return d


def _is_zero(e: Expr) -> bool:
    return e.is_const and e.value == 0


def loops(program: ast.Stmt):
    """Every loop of ``program`` without a loop in its body."""
    if isinstance(program, ast.Sequence):
        for s in program.body:
            yield from loops(s)
    elif isinstance(program, ast.If):
        yield from loops(program.then)
        if program.orelse is not None:
            yield from loops(program.orelse)
    elif isinstance(program, ast.Loop):
        inner = list(loops(program.body))
        if inner:
            yield from inner
        else:
            yield program
