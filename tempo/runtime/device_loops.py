"""Whole loops of the schedule as one device program (beyond TEMPO's per-island launches).

A loop of the schedule AST whose body is all device code (kernel launches
of fused islands and device ops, merges, conditions and frees; no user
function, no nested loop) runs as one launch on a backend that compiles
loops (:meth:`JaxBackend.device_loop`: a ``lax.scan`` inside ``jax.jit``).
:func:`plan` decides whether a loop qualifies and classifies every value
its body reads and writes:

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

Everything the host decides per iteration is computed before the launch:
which statements run (their ``if`` conditions), which branch each merge
takes, and what the islands' host steps compute (symbol values,
counter-based random numbers, spatial index starts). Frees inside the
loop drop points of stores after it. :class:`DeviceLoop` does that host
work around the backend's compiled loop; it answers ``False`` (and the
generated code runs the loop statement by statement instead) where a
launch finds what the compiled loop cannot do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge, Node
from tempo.schedule import ast
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr, seq
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


def _uses(e: Expr, var: str) -> bool:
    return any(s.name == var for s in e.free_symbols())


def _counter(e: Expr, var: str) -> Expr | None:
    return next((s for s in e.free_symbols() if s.name == var), None)


def _source(e: Edge, index: Expr, var: str, writers: dict, order: int, host) -> Source | None:
    key = (e.src, e.src_out)
    if e.src not in writers:
        if key in host:
            return None
        if not _uses(index, var):
            return Source(CLOSED, key, index, edge=e)
        if any(a.op == "slice" for a in index.args):
            return None
        return Source(GATHERED, key, index, edge=e)
    writer_order, writer = writers[e.src]
    shift = _shift(index, writer.point, var)
    if shift is None or shift < 0 or (shift == 0 and writer_order >= order):
        return None
    return Source(CARRIED if shift else LOCAL, key, shift=shift)


def _shift(index: Expr, point: tuple, var: str) -> int | None:
    """``d`` when reading ``index`` is reading the point the writer wrote ``d`` iterations earlier."""
    if len(index.args) != len(point) or any(a.op == "slice" for a in index.args):
        return None
    moving = [(a, p) for a, p in zip(index.args, point) if _uses(p, var)]
    if not moving:
        return None
    a, p = moving[0]
    v = _counter(p, var)
    slope, offset = simplify(p.substitute({v: v + 1}) - p), simplify(a - p)
    if not slope.is_const or not offset.is_const or slope.value == 0 or offset.value % slope.value:
        return None
    d = -offset.value // slope.value
    for x, q in zip(index.args, point):
        target = q.substitute({v: v - d}) if _uses(q, var) else q
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


class DeviceLoop:
    """Runs one planned loop as one launch of the backend's compiled loop (see the module docstring).

    Called by the generated code with the bounds and the enclosing loops' counters; returns
    False, having changed nothing, where this launch needs the statement-by-statement loop.
    """

    def __init__(self, plan: LoopPlan, compiled, sdg: SDG, stores: dict, backend, ledger):
        self.plan, self.compiled, self.sdg, self.stores, self.backend, self.ledger = \
            plan, compiled, sdg, stores, backend, ledger
        loop, var = plan.loop, plan.loop.var
        self.var, self.start, self.cond = var, compile_expr(loop.start), compile_expr(loop.cond)
        exprs = [loop.start, loop.cond] + [c for step in plan.steps for c in (*step.guard, *step.conds)
                                           if c is not None] + [c for _, guard in plan.frees for c in guard]
        self.schedule_names = sorted({s.name for e in exprs for s in e.free_symbols()} - {var})
        self.schedules: dict[tuple, tuple] = {}
        self.guards = [[compile_expr(c) for c in step.guard] for step in plan.steps]
        self.branches = [[None if c is None else compile_expr(c) for c in step.conds]
                         if isinstance(step.node.op, MergeOp) else None for step in plan.steps]
        self.points = [compile_expr(seq(*step.execute.point)) for step in plan.steps]
        self.indexes = [[compile_expr(src.index) if src.index is not None else None for src in step.inputs]
                        for step in plan.steps]
        self.writer = {(step.node.id, j): k for k, step in enumerate(plan.steps) for j in range(len(step.node.shapes))}
        self.rows = {key: _row_major(plan.steps[self.writer[key]].execute.point, var) for key in plan.written_back}
        self.sliced = {id(src): _row_major(src.index.args, var) for step in plan.steps for src in step.inputs
                       if src.kind == GATHERED}  # read as one slice of a block store where it can be
        self.free_points = [(compile_expr(seq(*free.point)), [compile_expr(c) for c in guard]) for free, guard in
                            plan.frees]
        self.failed: set[tuple] = set()

    def __call__(self, env: dict) -> bool:
        counters, runs, sels = self._schedule(env)
        if not counters:
            return True
        envs = [dict(env, **{self.var: c}) for c in counters]
        prepared = self._prepare(env, envs, runs, sels)
        if prepared is None:
            return False
        key, closed, xs, ring0 = prepared
        if key in self.failed:
            return False
        try:
            ring, ys = self.compiled(key, len(counters), closed, xs, ring0)
        except Exception:  # noqa: BLE001  the loop statement by statement says what failed, at its user's line
            self.failed.add(key)
            return False
        self._write_back(ys, envs, runs)
        self._free(envs)
        self.ledger.launches += 1
        return True

    # ----- the host's part, before the launch -----
    def _schedule(self, env: dict):
        """The loop's counter values, whether each step runs at each, and each merge's branch (cached)."""
        key = tuple(env[n] for n in self.schedule_names)
        cached = self.schedules.get(key)
        if cached is not None:
            return cached
        local, counters = dict(env), []
        local[self.var] = self.start(local)
        while self.cond(local):
            counters.append(local[self.var])
            local[self.var] += 1
        runs, sels = [], []
        for guards, branches in zip(self.guards, self.branches):
            at = [dict(env, **{self.var: c}) for c in counters]
            runs.append(np.array([all(g(e) for g in guards) for e in at], dtype=bool))
            sels.append(None if branches is None else
                        np.array([next((k for k, b in enumerate(branches) if b is None or b(e)), -1) for e in at],
                                 dtype=np.int32))
        cached = self.schedules[key] = (counters, runs, sels)
        return cached

    def _prepare(self, env: dict, envs: list[dict], runs, sels):
        """The compiled loop's static key, its inputs, per-iteration values and initial carry."""
        closed, gathered, sel_xs, arg_xs, keys = {}, {}, {}, {}, []
        for s, step in enumerate(self.plan.steps):
            ran = runs[s]
            for k, src in enumerate(step.inputs):
                wanted = ran if sels[s] is None else ran & (sels[s] == k)
                if src.kind == CLOSED:
                    closed[f"{s}.{k}"] = (self._read(src, self.indexes[s][k](env)) if wanted.any()
                                          else self._zeros(src.edge, env))
                elif src.kind == GATHERED:
                    gathered[f"{s}.{k}"] = self._gather(src, self.indexes[s][k], envs, wanted, env)
            if sels[s] is not None and len(step.inputs) > 1:
                sel_xs[str(s)] = sels[s]
            first = int(np.argmax(ran)) if ran.any() else 0
            dims = self._dim_env(s, env, envs[first])
            keys.append(self.compiled.static_key(s, dims))
            if self.compiled.needs_args(s):
                if not ran.any():
                    return None
                forms, leaves = set(), {}
                for e, r in zip(envs, ran):
                    form, args = self.compiled.step_args(s, self._dim_env(s, env, e if r else envs[first]))
                    forms.add(form)
                    for name, value in args.items():
                        leaves.setdefault(name, []).append(value)
                if len(forms) != 1:
                    return None
                keys.append(forms.pop())
                arg_xs[str(s)] = {name: np.stack(values) for name, values in leaves.items()}
        ring0 = {f"{n}_{j}": tuple(self._initial(n, j, env, envs[0], back) for back in range(1, depth + 1))
                 for (n, j), depth in self.plan.carried.items()}
        xs = {"sel": sel_xs, "g": gathered, "a": arg_xs}
        return (len(envs), tuple(keys)), closed, xs, ring0

    def _dim_env(self, s: int, env: dict, at: dict) -> dict:
        """What a kernel of step ``s`` sees: the bounds and its point's dims."""
        point = self.points[s](at)
        return dict(env, **{d.name: p for d, p in zip(self.plan.steps[s].node.domain, point)})

    def _read(self, src: Source, index):
        return self.stores[src.key].read(index)

    def _zeros(self, edge: Edge, env: dict):
        shape = tuple(s if isinstance(s, int) else int(compile_expr(s)(env)) for s in self.sdg.read_shape(edge))
        dtype = self.sdg.nodes[edge.src].dtypes[edge.src_out]
        return self.backend.cast(np.zeros(shape, dtype), dtype)

    def _gather(self, src: Source, index, envs: list[dict], wanted, env: dict):
        store = self.stores[src.key]
        first = index(envs[0]) if store.kind == "block" and self.sliced[id(src)] else None
        if first is not None and first[-1] >= 0:
            try:  # consecutive rows of one block: one view (rows no step reads are never used)
                return store.read(first[:-1] + (slice(first[-1], first[-1] + len(envs)),))
            except TempoError:
                pass
        values = [self._read(src, index(e)) if w else None for e, w in zip(envs, wanted)]
        filler = next((v for v in values if v is not None), None)
        if filler is None:
            filler = self._zeros(src.edge, env)
        dtype = self.sdg.nodes[src.key[0]].dtypes[src.key[1]]
        return self.backend.stack([filler if v is None else v for v in values], (len(values),), dtype)

    def _initial(self, n: int, j: int, env: dict, first: dict, back: int):
        """The carried value of ``back`` iterations before the first: from the store where a
        previous launch wrote it back, else zeros (no run reads it)."""
        node = self.sdg.nodes[n]
        if (n, j) in self.plan.written_back:
            at = dict(first, **{self.var: first[self.var] - back})
            try:
                return self.backend.cast(self.stores[(n, j)].read(self.points[self.writer[(n, j)]](at)),
                                         node.dtypes[j])
            except TempoError:
                pass
        shape = tuple(s if isinstance(s, int) else int(compile_expr(s)(env)) for s in node.shapes[j])
        return self.backend.cast(np.zeros(shape, node.dtypes[j]), node.dtypes[j])

    # ----- after the launch -----
    def _write_back(self, ys, envs: list[dict], runs) -> None:
        for key, values in zip(self.plan.written_back, ys):
            s = self.writer[key]
            store, point = self.stores[key], self.points[s]
            if store.kind == "block" and self.rows[key] and runs[s].all():
                first = point(envs[0])
                if first[-1] // store.length == (first[-1] + len(envs) - 1) // store.length:
                    store.write_rows(first[:-1], first[-1], values)
                    continue
            rows = self.compiled.unstack(values)
            for e, ran, row in zip(envs, runs[s], rows):
                if ran:
                    store.write(point(e), row)

    def _free(self, envs: list[dict]) -> None:
        for (free, _), (point, guards) in zip(self.plan.frees, self.free_points):
            outs = [j for j in free.freed(len(self.sdg.nodes[free.node_id].shapes))
                    if self.stores[(free.node_id, j)].kind == "point"]
            for e in envs:
                if all(g(e) for g in guards):
                    at = point(e)
                    for j in outs:
                        self.stores[(free.node_id, j)].free_point(at)


def _row_major(point: tuple, var: str) -> bool:
    """Whether a writer at ``point`` writes consecutive rows of its innermost dim as the counter grows."""
    *outer, last = point
    if any(_uses(p, var) for p in outer) or not _uses(last, var):
        return False
    v = _counter(last, var)
    slope = simplify(last.substitute({v: v + 1}) - last)
    return slope.is_const and slope.value == 1


def bind(sdg: SDG, program: ast.Stmt, stores: dict, backend, keep, host, ledger) -> dict[int, DeviceLoop]:
    """id(loop) -> its :class:`DeviceLoop`, for every loop of ``program`` the backend compiles whole."""
    kinds = {key: store.kind for key, store in stores.items()}
    out = {}
    for loop in loops(program):
        planned = plan(sdg, loop, program, kinds, keep, host)
        compiled = backend.device_loop(planned, sdg) if planned is not None else None
        if compiled is not None:
            out[id(loop)] = DeviceLoop(planned, compiled, sdg, stores, backend, ledger)
    return out
