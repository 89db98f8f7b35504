"""Which loops of the schedule run whole as one device program, and where their values come from.

A loop of the schedule AST whose body is all device code (kernel launches
of fused islands and device ops, merges, conditions and frees; no user
function) may run as one launch on a backend that compiles loops.
:func:`plan` decides whether a loop qualifies and classifies every value
its body reads and writes:

- a value computed in the loop and read in the same iteration is a local
  of the traced body; one read ``d`` iterations later (``x[t - 1]``) is
  carried from iteration to iteration (the last ``d`` values);
- a value computed outside the loop and read at an index that does not
  depend on the loop's counter is an input of the whole loop (read once);
  one read at an index that does (``x[i, t]`` of a tensor computed before
  the loop) is gathered before the loop, one value per iteration, all of
  one shape (a tile's value, whose shape changes at a partial last tile,
  keeps the loop on the host);
- what a statement after the loop reads (or the program fetches) is written
  back into its tensor store after the loop, a block store's rows in one
  write; the body's frees the launch runs are of what a store holds: values
  computed outside the loop and the outputs written back (a value that stays
  on the device has no point in a store to free).

A shape may depend on the loop's counter where it is a tile's: one size at
every tile where the tiles divide their dims (``min(Z, T - Z*t_tile)`` rows:
``Z`` where ``Z`` divides ``T``, the last tile partial where it does not). Such a
loop's plan lists those steps (:attr:`LoopPlan.shaped`), and each launch
checks, with the run's bounds, that their shapes are one at every iteration;
where they are not, the host loop runs the loop.

A loop over iterations may hold loops (acting's loop over ``t`` inside the
loop over ``i``): each nested loop that qualifies by itself runs whole at
every iteration (:class:`Nested`), its inputs found in the enclosing body,
and a statement after it reads its rows (``x[i, 0:T]``) as one value. A
nested loop may read another's rows in windows that start at its counter and
are shorter at the end of the rows (n-step returns' ``r[t:min(t + n, T)]``):
each window is read as ``n`` rows, zeros past the last, where the statement
reading it computes the same from the padded window
(:func:`tempo.plan.window_padding.ignores_zero_padding`: a sum or discounted
sum along it does, a mean or a max does not, and its loop stays on the host). Such
a loop may also hold sinks and checkpoints (user functions labelled
``sink`` or ``checkpoint``): their inputs are kept at every iteration and
the host calls them after the launch, in order. The whole run over ``i``
is then one device program.

A loop over a dim that ends at run time (``tpo.end_when``) holds the dim's
check; it qualifies like any loop, the check a step whose flag the device
reduces (:attr:`LoopPlan.end`), so that the loop runs in chunks of steps
and exits on the host after the chunk where the flag first holds. A loop over
iterations may hold one such loop (:attr:`LoopPlan.ending`): it runs to the
cap on the device, stopping at the end, and the statements after it in the
iteration read its rows padded past ``T[i]`` with zeros where each of their
ops keeps the rows before the end (:mod:`tempo.plan.ended_loops`, by the
rules of :mod:`tempo.plan.ended_rows`; :attr:`LoopPlan.padded`), as may a
nested loop after it that runs to ``T``
and whose rows those statements read whole; a mean over ``0:T``, a scalar
value of ``T`` and a read of its row at ``T - 1`` are computed with ``T[i]``.
A statement after it that reads ``T`` otherwise (``x[i, T - 2]``, a max over
``0:T``, a condition on ``T``) keeps the loop over iterations on the host.

:mod:`tempo.runtime.device_loops` runs the plans.
"""
from __future__ import annotations

from dataclasses import replace

from tempo.ir.ends import is_end
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import size
from tempo.plan.ended_loops import padded_steps
from tempo.plan.loop_plan import (CARRIED, CLOSED, DEFERRED_LABELS, GATHERED, LOCAL, ROW, ROWS, SLICED, STACKED, WINDOW,
                                  LoopPlan, Nested, Source, Step)
from tempo.plan.window_padding import ignores_zero_padding
from tempo.schedule import ast
from tempo.symbolic.affine import counter, uses
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr, bound_name, bound_of
from tempo.symbolic.simplify import simplify


def plan(sdg: SDG, loop: ast.Loop, program: ast.Stmt, kinds: dict, keep, host=frozenset(),
         nested: bool = False) -> LoopPlan | None:
    """The plan of ``loop`` as one device program, or None when its body is not all device code
    (or, unless it is ``nested`` in a loop that runs whole, is one launch, which gains nothing).

    ``kinds``: (node, output) -> store kind; ``keep``: fetched nodes; ``host``: stores a swap plan keeps
    on the host (a loop touching one is not compiled)."""
    body = _body(loop.body, ())
    if body is None or loop.step != 1:
        return None
    inner_loops = [(k, s, guard) for k, (s, guard) in enumerate(body) if isinstance(s, ast.Loop)]
    if inner_loops:
        return _enclosing(sdg, loop, program, kinds, keep, host, body)
    executes = [(s, guard) for s, guard in body if isinstance(s, ast.Execute)]
    if not executes or not nested and (len(executes) < 2 or all(isinstance(sdg.nodes[s.node_id].op, MergeOp)
                                                                for s, _ in executes)):
        return None
    counts: dict[int, int] = {}
    for s in ast.statements(program):
        counts[s.node_id] = counts.get(s.node_id, 0) + 1
    writers = {s.node_id: (k, s) for k, (s, _) in enumerate(executes)}
    if len(writers) != len(executes) or any(counts[n] != 1 for n in writers):
        return None
    steps = _steps(sdg, executes, kinds, host, False,
                   lambda e, index, order, pin: _source(sdg, e, index, loop.var, writers, order, host, pin,
                                                        windows=nested), loop.var)
    if steps is None:
        return None
    ends = [k for k, step in enumerate(steps) if is_end(step.node)]
    carried = _carried(steps)
    executed = set(counts)
    written_back = tuple((n, j) for n in writers for j in range(len(sdg.nodes[n].shapes))
                         if n in keep or any(e.sink not in writers and e.sink in executed
                                             for e in sdg.edges if e.src == n and e.src_out == j))
    frees = _held_frees(sdg, body, set(writers), written_back)
    return LoopPlan(loop, tuple(steps), carried, written_back, frees, end=ends[0] if ends else None,
                    shaped=_shaped_steps(sdg, steps))


def _held_frees(sdg: SDG, body: list, writers: set, written_back: tuple) -> tuple:
    """The Free statements of ``body`` (with their conditions), each limited to the outputs a store
    holds while the loop runs whole: every output of a node computed outside the loop, the outputs
    written back of one the loop or a loop nested in it computes (``writers``)."""
    frees = []
    for s, guard in body:
        if isinstance(s, ast.Free):
            outputs = s.freed(len(sdg.nodes[s.node_id].shapes))
            if s.node_id in writers:
                outputs = tuple(j for j in outputs if (s.node_id, j) in written_back)
            if outputs:
                frees.append((replace(s, outputs=outputs), guard))
    return tuple(frees)


def _enclosing(sdg: SDG, loop: ast.Loop, program: ast.Stmt, kinds: dict, keep, host, body) -> LoopPlan | None:
    """The plan of a loop whose body holds loops (see the module docstring), or None."""
    counts: dict[int, int] = {}
    for s in ast.statements(program):
        counts[s.node_id] = counts.get(s.node_id, 0) + 1
    executes = [(s, guard) for s, guard in body if isinstance(s, ast.Execute)]
    writers = {s.node_id: (k, s) for k, (s, _) in enumerate(executes)}
    if len(writers) != len(executes) or any(counts[n] != 1 for n in writers):
        return None
    inner_plans, at = [], 0
    for s, guard in body:
        if isinstance(s, ast.Execute):
            at += 1
        elif isinstance(s, ast.Loop):
            inner = plan(sdg, s, program, kinds, keep, host, nested=True)
            if inner is None or inner.nested:
                return None
            inner_plans.append((s, guard, inner, at))
    ending = [k for k, (_, _, inner, _) in enumerate(inner_plans) if inner.end is not None]
    if len(ending) > 1:
        return None
    inner_writers = {step.node.id: (k, s, step) for k, (s, _, inner, _) in enumerate(inner_plans)
                     for step in inner.steps}
    nested = []
    for reader, (s, guard, inner, at) in enumerate(inner_plans):
        inputs = []
        for k, step in enumerate(inner.steps):
            for j, src in enumerate(step.inputs):
                if src.kind == WINDOW:
                    window = _window_rows(src, inner_writers.get(src.key[0]), reader, inner_plans)
                    if window is None:
                        return None
                    inputs.append((f"{k}.{j}", window))
                    continue
                if src.kind in (GATHERED, CLOSED) and src.key[0] in inner_writers:
                    stacked = _stacked(src, inner_writers[src.key[0]], reader, inner_plans, loop.var, sdg.tiles)
                    if stacked is None:
                        return None
                    inputs.append((f"{k}.{j}", stacked))
                    continue
                if src.kind == GATHERED and src.key[0] in writers:
                    return None
                if src.kind == CLOSED:
                    outer = _source(sdg, src.edge, src.index, loop.var, writers, at, host)
                    if outer is None:
                        return None
                    inputs.append((f"{k}.{j}", outer))
        nested.append(Nested(inner, at, guard, tuple(inputs)))
    steps = _steps(sdg, executes, kinds, host, True,
                   lambda e, index, order, pin: (_rows(e, index, inner_writers[e.src], nested, order)
                                                 if e.src in inner_writers
                                                 else _source(sdg, e, index, loop.var, writers, order, host, pin)),
                   loop.var)
    if steps is None:
        return None
    ends = [k for k, step in enumerate(steps) if is_end(step.node)]
    outside = set(counts) - set(writers) - set(inner_writers)
    for n in inner_writers:  # a nested loop's values are read in this loop only
        if n in keep or any(e.src == n and e.sink in outside for e in sdg.edges):
            return None
    carried = _carried(steps)
    for n in nested:
        for _, src in n.inputs:
            if src.kind == STACKED and src.shift:
                carried[src.key] = max(carried.get(src.key, 0), src.shift)
    written_back = tuple((n, j) for n in writers for j in range(len(sdg.nodes[n].shapes))
                         if n in keep or any(e.sink in outside for e in sdg.edges if e.src == n and e.src_out == j))
    held = set(writers) | set(inner_writers)
    frees = _held_frees(sdg, body, held, written_back)
    nested = [replace(n, plan=replace(n.plan, frees=_held_frees(sdg, n.plan.frees, held, written_back)))
              for n in nested]
    padded, dim = (), None
    if ending:
        if ends:
            return None
        dim = nested[ending[0]].plan.steps[nested[ending[0]].plan.end].node.domain[-1]
        padding = padded_steps(sdg, steps, nested, ending[0], written_back, bound_of(dim))
        if padding is None:
            return None
        padded, nested = padding
    return LoopPlan(loop, tuple(steps), carried, written_back, frees, tuple(nested), ends[0] if ends else None,
                    _shaped_steps(sdg, steps), ending[0] if ending else None, padded, dim)


def _stacked(src: Source, writer, reader: int, inner_plans: list, var: str, tiles: dict) -> Source | None:
    """A nested loop's read, row by row, of the rows nested loop ``writer`` wrote ``d`` iterations of the
    loop over ``var`` earlier (0: in this iteration, the writer running first), or None. Both loops
    run over the same counters (checked at each launch)."""
    k, inner_loop, step = writer
    if src.kind != GATHERED or src.key not in inner_plans[k][2].written_back:
        return None
    if any(a.op == "slice" for a in src.index.args):
        return _sliced(src, writer, reader, inner_plans, var, tiles)
    point = _renamed(step.execute.point, inner_loop.var, src.index, inner_plans[reader][0].var)
    shift = _iterations_back(src.index, point, var)
    if shift is None or shift < 0 or (shift == 0 and k >= reader):
        return None
    return Source(STACKED, src.key, src.index, shift, src.edge)


def _renamed(point: tuple, var: str, index: Expr, to: str) -> tuple:
    """``point`` with the counter ``var`` written as ``index``'s counter ``to`` (two loops over the same
    counters)."""
    v = next((counter(p, var) for p in point if uses(p, var)), None)
    w = next((counter(a, to) for a in index.args if uses(a, to)), None)
    return point if var == to or v is None or w is None else tuple(p.substitute({v: w}) for p in point)


def _sliced(src: Source, writer, reader: int, inner_plans: list, var: str, tiles: dict) -> Source | None:
    """A nested loop's read of ``Z`` consecutive rows per iteration (``x[i, Z*t:Z*t + Z]``, a tile) of the
    rows nested loop ``writer`` wrote in this iteration of the loop over ``var`` (run before it), where
    the writer's rows are its iterations; None otherwise. That the slices tile the writer's rows is
    checked at each launch."""
    k, inner_loop, step = writer
    rvar = inner_plans[reader][0].var
    point, index = step.execute.point, src.index.args
    moving = [m for m, p in enumerate(point) if uses(p, inner_loop.var)]
    if k >= reader or len(index) != len(point) or len(moving) != 1 or \
            [m for m, a in enumerate(index) if a.op == "slice"] != moving:
        return None
    at = moving[0]
    if any(not _is_zero(simplify(a - p)) for m, (a, p) in enumerate(zip(index, point)) if m != at) or \
            any(uses(a, var) != uses(p, var) for a, p in zip(index, point)) or \
            not _is_zero(simplify(point[at] - counter(point[at], inner_loop.var))):
        return None
    start = index[at].args[0]
    if not uses(start, rvar):
        return None
    v = counter(start, rvar)
    rows, offset = simplify(start.substitute({v: v + 1}) - start), simplify(start.substitute({v: 0}))
    if not rows.is_const or not _is_zero(offset) or \
            _tile_size(size(src.edge.index.args[at].args[1] - src.edge.index.args[at].args[0]), tiles) != rows.value:
        return None  # not consecutive tiles: a window (n-step returns' r[t:t + n]) or a strided read
    return Source(SLICED, src.key, src.index, int(rows.value), src.edge)


def _window_rows(src: Source, writer, reader: int, inner_plans: list) -> Source | None:
    """A nested loop's read of windows (``r[t:min(t + n, T)]``) of the rows nested loop ``writer`` wrote
    in this iteration (run before it), where the writer's rows are its iterations and each window starts
    at the reader's counter; None otherwise. That both loops run over the same counters and that each
    window ends at ``n`` rows or the writer's last row is checked at each launch."""
    if writer is None:
        return None
    k, inner_loop, step = writer
    rvar = inner_plans[reader][0].var
    point, index = step.execute.point, src.index.args
    moving = [m for m, p in enumerate(point) if uses(p, inner_loop.var)]
    if k >= reader or src.key not in inner_plans[k][2].written_back or len(index) != len(point) or \
            len(moving) != 1 or [m for m, a in enumerate(index) if a.op == "slice"] != moving:
        return None
    at = moving[0]
    if any(not _is_zero(simplify(a - p)) for m, (a, p) in enumerate(zip(index, point)) if m != at) or \
            not _is_zero(simplify(point[at] - counter(point[at], inner_loop.var))):
        return None
    start = index[at].args[0]
    if not uses(start, rvar) or not _is_zero(simplify(start - counter(start, rvar))):
        return None
    return Source(WINDOW, src.key, src.index, src.shift, src.edge)


def _window(sdg: SDG, e: Edge, index: Expr, var: str) -> int | None:
    """``n`` where ``index`` reads a window ``x[t:min(t + n, X)]`` along the counter ``var`` (``n`` rows,
    fewer at the end) and ``e``'s reader computes the same from it padded with zeros to ``n`` rows
    (:func:`tempo.plan.window_padding.ignores_zero_padding`); else None."""
    slices = [m for m, a in enumerate(index.args) if a.op == "slice"]
    moving = [m for m in slices if uses(index.args[m], var)]
    if len(moving) != 1:
        return None
    start, stop = index.args[moving[0]].args
    if not uses(start, var) or stop.op != "min" or len(stop.args) != 2:
        return None
    v = counter(start, var)
    if not _is_zero(simplify(start.substitute({v: v + 1}) - start - 1)):
        return None
    ahead = [simplify(x - start) for x in stop.args if uses(x, var)]
    if len(ahead) != 1 or not ahead[0].is_const or ahead[0].value < 1:
        return None
    axis = slices.index(moving[0])
    return int(ahead[0].value) if ignores_zero_padding(sdg.nodes[e.sink].op, e.sink_in, axis) else None


def _rows(e: Edge, index: Expr, writer, nested: list, order: int) -> Source | None:
    """A read of the rows a nested loop wrote in this iteration: at the writer's point with the nested
    loop's counter replaced by a slice (whether the slice covers the loop is checked at each launch),
    or by a point (one row, which the loop must have run)."""
    k, inner_loop, step = writer
    if nested[k].at > order or (e.src, e.src_out) not in nested[k].plan.written_back:
        return None
    point = step.execute.point
    moving = [m for m, p in enumerate(point) if uses(p, inner_loop.var)]
    if len(index.args) != len(point) or len(moving) != 1:
        return None
    at = moving[0]
    if any(not _is_zero(simplify(a - p)) for m, (a, p) in enumerate(zip(index.args, point)) if m != at):
        return None
    if index.args[at].op == "slice":
        return Source(ROWS, (e.src, e.src_out), index, edge=e) if at == len(point) - 1 else None
    if not _is_zero(simplify(point[at] - counter(point[at], inner_loop.var))):
        return None  # rows are the loop's iterations only where the writer's point is its counter
    return Source(ROW, (e.src, e.src_out), index, shift=at, edge=e)  # shift: the rows' coordinate


def _body(stmt: ast.Stmt, guard: tuple, nested: bool = True):
    """The loop body's Execute, Free and (``nested``) Loop statements with the ``if`` conditions they
    run under (None when it holds a loop that holds a loop)."""
    if isinstance(stmt, ast.Sequence):
        out = []
        for s in stmt.body:
            inner = _body(s, guard, nested)
            if inner is None:
                return None
            out += inner
        return out
    if isinstance(stmt, ast.If):
        then = _body(stmt.then, guard + (stmt.cond,), nested)
        if then is None or stmt.orelse is None:
            return then
        orelse = _body(stmt.orelse, guard + (~stmt.cond,), nested)
        return None if orelse is None else then + orelse
    if isinstance(stmt, ast.Loop):
        return [(stmt, guard)] if nested and _body(stmt.body, (), False) is not None else None
    return [(stmt, guard)]


def _steps(sdg: SDG, executes: list, kinds: dict, host, deferred_ok: bool, source_of,
           var: str | None = None) -> list[Step] | None:
    """The device loop's steps, one per Execute, each input's source given by ``source_of(edge, index at
    the step's point, order)``; None where a statement or a read cannot run on the device. ``var``: the
    counter of a loop that may hold the end check of its own dim (at the point ``(..., var)``)."""
    steps = []
    for order, (ex, guard) in enumerate(executes):
        node = sdg.nodes[ex.node_id]
        ending = var is not None and is_end(node) and ex.point[-1].op == "sym" and ex.point[-1].name == var
        if not (ending or _on_device(node, kinds, host, deferred_ok, sdg.tiles)):
            return None
        at = dict(zip(node.domain, ex.point))
        inputs, conds = [], []
        for e in sdg.in_edges(node.id):
            if e.cond is not None and not isinstance(node.op, MergeOp):
                return None
            source = source_of(e, e.index.substitute(at), order, _pinned(e.cond, at, var))
            if source is None or source.kind == GATHERED and _varying_shape(sdg, e, source.index, var) \
                    and not _tile_shaped(sdg.read_shape(e), sdg.tiles):
                return None
            inputs.append(source)
            conds.append(None if e.cond is None else e.cond.substitute(at))
        steps.append(Step(ex, node, guard, tuple(inputs), tuple(conds)))
    return steps


def _varying_shape(sdg: SDG, e: Edge, index: Expr, var: str | None) -> bool:
    """Whether the values a loop over ``var`` gathers from ``e``'s source at ``index`` may differ in shape
    from iteration to iteration (a tile's rows, the last tile partial), so that they stack into no array."""
    src = sdg.nodes[e.src]
    shape = src.shapes[e.src_out]
    if _static(shape):
        return False
    if any(a.op == "slice" for a in index.args) or len(index.args) != len(src.domain):
        return True
    at = dict(zip(src.domain, index.args))
    return any(not isinstance(s, int) and uses(s.substitute(at), var) for s in shape)


def _pinned(cond: Expr | None, at: dict, var: str | None) -> dict:
    """``{counter: value}`` where a merge branch's condition at the step's point pins the loop's counter
    to one value (``0 == t``), else empty."""
    if cond is None or var is None:
        return {}
    c = cond.substitute(at)
    if c.op != "eq":
        return {}
    a, b = c.args
    sym, value = (a, b) if a.op == "sym" else (b, a)
    return {sym: value} if sym.op == "sym" and sym.name == var and value.is_const else {}


def _carried(steps: list[Step]) -> dict[tuple[int, int], int]:
    """Each value the loop carries from earlier iterations, with how many iterations back it is read."""
    carried: dict[tuple[int, int], int] = {}
    for step in steps:
        for source in step.inputs:
            if source.kind == CARRIED:
                carried[source.key] = max(carried.get(source.key, 0), source.shift)
    return carried


def _on_device(node: Node, kinds: dict, host, deferred_ok: bool, tiles: dict) -> bool:
    """Whether ``node`` may run in a device loop: no user function (but a sink or checkpoint where
    ``deferred_ok``: called after the launch), static shapes or a tile's (``tiles``: :attr:`SDG.tiles`),
    and no output in a window store or kept on the host."""
    if isinstance(node.op, UDFOp) and not (deferred_ok and node.op.label in DEFERRED_LABELS):
        return False
    if not all(_static(s) or _tile_shaped(s, tiles) for s in node.shapes):
        return False
    return not any(kinds.get((node.id, j)) == "window" or (node.id, j) in host for j in range(len(node.shapes)))


def _static(shape: tuple) -> bool:
    return all(isinstance(s, int) or all(x.kind == "bound" for x in s.free_symbols()) for s in shape)


def _tile_size(d, tiles: dict) -> int | None:
    """The value of size ``d`` at every tile where each tile divides its dim, where it depends on no counter
    but tile dims' (``min(T, 4*t_tile + 4) - 4*t_tile``: 4 rows, fewer at a partial last tile) and is one
    value at every tile for every number of tiles probed; else None (a static size too).
    ``tiles``: :attr:`SDG.tiles`."""
    if isinstance(d, int):
        return d
    names = d.free_symbols()
    if all(x.kind == "bound" for x in names) or any(x.kind != "bound" and bound_name(x.dim) not in tiles
                                                     for x in names):
        return None  # static, or a counter that is no tile dim's
    fn, seen = compile_expr(d), set()
    for n in range(1, 6):
        env = {x.name: FAR for x in names if x.kind == "bound"}
        for tile, (whole, rows) in tiles.items():
            env[tile], env[whole] = n, rows * n
        for k in range(n):
            seen.add(fn(dict(env, **{x.name: k for x in names if x.kind != "bound"})))
    return seen.pop() if len(seen) == 1 else None


FAR = 720720  # a bound other than a tile's and the dim it tiles, far from every counter value probed


def _tile_shaped(shape: tuple, tiles: dict) -> bool:
    """Whether every size of ``shape`` is static or a tile's (:func:`_tile_size`)."""
    return all(_static((d,)) or _tile_size(d, tiles) is not None for d in shape)


def _shaped_steps(sdg: SDG, steps: list[Step]) -> tuple[int, ...]:
    """The steps whose own shapes or whose inputs' shapes are a tile's (:func:`_tile_shaped`), not static
    (a window read as its ``n`` rows is static)."""
    return tuple(k for k, step in enumerate(steps)
                 if not all(_static(s) for s in step.node.shapes)
                 or not all(_static(sdg.read_shape(e)) for e, src in zip(sdg.in_edges(step.node.id), step.inputs)
                            if src.kind != WINDOW))


def _source(sdg: SDG, e: Edge, index: Expr, var: str, writers: dict, order: int, host, pin: dict | None = None,
            windows: bool = False) -> Source | None:
    """Where a statement of the loop at position ``order`` reads ``index`` of ``e``'s source; ``pin``:
    the counter's only value where the read happens (a merge branch's ``0 == t``); ``windows``: a window
    read padded with zeros (:func:`_window`) may be a ``window`` source (of a loop nested in one that
    finds its rows)."""
    key = (e.src, e.src_out)
    if e.src not in writers:
        if key in host:
            return None
        if not uses(index, var):
            return Source(CLOSED, key, index, edge=e)
        window = _window(sdg, e, index, var) if windows else None
        if window is not None:
            return Source(WINDOW, key, index, window, e)
        if any(a.op == "slice" and uses(simplify(a.args[1] - a.args[0]), var) for a in index.args) and \
                not _tile_shaped(sdg.read_shape(e), sdg.tiles):
            return None  # a slice whose size changes from iteration to iteration, not as a tile's
        return Source(GATHERED, key, index, edge=e)
    writer_order, writer = writers[e.src]
    shift = _iterations_back(index, writer.point, var)
    if shift is None and pin and all(_is_zero(simplify(a - p.substitute(pin))) for a, p in
                                     zip(index.args, writer.point)) and len(index.args) == len(writer.point):
        shift = 0  # read at the point this iteration writes, where the branch is taken
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
    """Every loop of ``program``, inner loops first (:func:`plan` decides which qualify)."""
    if isinstance(program, ast.Sequence):
        for s in program.body:
            yield from loops(s)
    elif isinstance(program, ast.If):
        yield from loops(program.then)
        if program.orelse is not None:
            yield from loops(program.orelse)
    elif isinstance(program, ast.Loop):
        yield from loops(program.body)
        yield program


def row_major(point: tuple, var: str) -> bool:
    """Whether a writer at ``point`` writes consecutive rows of its innermost dim as the counter grows."""
    *outer, last = point
    if any(uses(p, var) for p in outer) or not uses(last, var):
        return False
    v = counter(last, var)
    slope = simplify(last.substitute({v: v + 1}) - last)
    return slope.is_const and slope.value == 1
