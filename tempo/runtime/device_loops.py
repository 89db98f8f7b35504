"""Whole loops of the schedule as one device program (beyond TEMPO's per-island launches).

A loop of the schedule AST whose body is all device code (kernel launches
of fused islands and device ops, merges, conditions and frees; no user
function, no nested loop) runs as one launch on a backend that compiles
loops (:meth:`JaxBackend.device_loop`: a ``lax.scan`` inside ``jax.jit``), and
so does a loop over iterations whose nested loops each qualify and whose
user functions are sinks and checkpoints: the whole run, all iterations
with their acting loops and updates, as one program.
:func:`tempo.plan.device_loops.plan` decides whether a loop qualifies and
classifies every value its body reads and writes (locals, carries, inputs,
gathered values, values written back); this module runs those plans.

Everything the host decides per iteration is computed before the launch:
which statements run (their ``if`` conditions), which branch each merge
takes, the islands' index forms and normal random numbers, by
:class:`~tempo.runtime.launch_prep.LaunchPreparation`, evaluated over all
the launch's steps at once (:mod:`tempo.runtime.step_values`); the islands'
symbol values, spatial index starts and uniform random numbers are computed
on the device from the loop's counter (the launch's first counter and the
bounds are the launch's ``at`` input). Frees inside the loop drop points of stores after it (their
guards and points evaluated over the arrays of the launch's counters). :class:`DeviceLoop` does that host
work around the backend's compiled loop and touches no store: the
generated code (:mod:`tempo.runtime.codegen`) writes each launch as it
writes a kernel's (:mod:`tempo.runtime.launches`).

A nested loop's host work is done for every iteration of the enclosing
loop before the launch, and stacked (its per-iteration values, its gathered
values, those the same at every iteration read once per launch); a
statement after it reads its rows only where they cover the slice it reads,
or one row only where the loop ran it, and a nested loop reads another's
rows row by row only where both run over the same counters, or a tile of
``Z`` rows at a time only where its tiles cover the other's rows in order,
or a window of ``n`` rows from its counter on only where both run over the
same consecutive counters and each window ends at ``n`` rows or the last.
A loop whose plan lists steps of a tile's shape (:attr:`LoopPlan.shaped`)
runs a launch only where those shapes are one at every iteration with the
run's bounds (each tile ``Z`` rows: ``Z`` divides the dim); otherwise the
host loop runs it. Sinks and
checkpoints of the loop are called after the launch, once per iteration
where they run, in the order of the iterations, with the values the device
kept for them. Such a loop runs its
first iteration alone, then chunks of at most :attr:`DeviceLoop.chunk`
iterations, one launch each (of one program: a launch of fewer iterations
skips the rest), the carry handed from one to the next, so that its sinks
report as it goes. Each launch is prepared just before it; where the first
cannot run, the host loop runs the loop, and a later one that cannot (its
iterations compile differently) is an error.

A loop over a dim that ends at run time (its plan's ``end``: the
``tpo.end_when`` check of the dim) runs in chunks of ``k`` steps, one
launch each (:meth:`~tempo.runtime.ends.EndCheck.chunk`), from step 0 up to
the cap the run gives the dim, the carry handed from one to the next. The
host reads the chunk's flags once per launch (one transfer), and the first
that holds ends the loop there: the steps before it and it are written back
and freed as in any launch, and the device skipped every step after it, so
that the stores hold exactly ``0:T`` and the results are the same for every
``k``. The generated code then sets the dim's bound to the length the
dim's :class:`~tempo.runtime.ends.EndCheck` records. A loop over iterations
that holds such a loop (its plan's ``ending``) runs it to the cap within each
launch, stopping on the device at its end; the launch returns ``T[i]`` of its
iterations, read on the host once per launch and recorded in the check.

A launch's buffers count in the run's :class:`~tempo.runtime.memory.Ledger`
while it holds them, under the generated code's name of the loop: its carry
(``device loop D0 carry``: the values later iterations read, such as
parameters, optimizer state and recurrent state, and the nested loops'
initial carries), the per-iteration inputs it is handed (``inputs``) and the
rows it returns (``rows``), from the launch until the rows are written back.
Under a device budget, the first launch of a loop whose buffers would go
over it runs no more: a warning names the loop, and the generated code runs
it statement by statement (a later launch that would is an error, as the
budget is).
"""
from __future__ import annotations

import copy
import operator
import time
import warnings

import numpy as np

from tempo.errors import TempoError
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG
from tempo.plan.device_loops import row_major
from tempo.plan.loop_plan import CLOSED, GATHERED, ROW, ROWS, SLICED, STACKED, WINDOW, LoopPlan
from tempo.runtime.launch_prep import LaunchPreparation, held_at
from tempo.runtime.launches import Launch, Launches, Reads, Unsliced, first_rows, nbytes, resolve
from tempo.runtime.memory import BudgetExceeded
from tempo.runtime.profile import loop_dim
from tempo.runtime.step_values import Span, vector_expr
from tempo.symbolic.affine import uses
from tempo.symbolic.evaluate import compile_expr, to_python
from tempo.symbolic.expr import seq


class DeviceLoop(LaunchPreparation):
    """Runs one planned loop as launches of the backend's compiled loop (see the module docstring).

    The generated code calls :meth:`launches` with the bounds and the enclosing loops' counters,
    and for each :class:`Launch` reads what it lists from the stores, calls this loop with the
    values (:meth:`__call__`), writes back and frees what it lists and calls :meth:`done`; where
    the loop needs the statement-by-statement loop, nothing is written and ``ran`` is False.
    Made once per program (its expressions compiled then, ``kinds``: each tensor's store kind);
    :meth:`bind` gives it one run's ledger, end checks and block lengths.
    """

    chunk = 16  # the most iterations of a loop over iterations (one with nested loops) per launch

    def __init__(self, plan: LoopPlan, compiled, sdg: SDG, backend, kinds: dict):
        self.plan, self.compiled, self.sdg, self.backend, self.kinds = plan, compiled, sdg, backend, kinds
        loop, var = plan.loop, plan.loop.var
        self.var, self.start, self.cond = var, compile_expr(loop.start), compile_expr(loop.cond)
        exprs = [loop.start, loop.cond] + [c for step in plan.steps for c in (*step.guard, *step.conds)
                                           if c is not None] + [c for _, guard in plan.frees for c in guard]
        exprs += [c for nested in plan.nested for c in nested.guard]
        self.nested = [DeviceLoop(n.plan, inner, sdg, backend, kinds)
                       for n, inner in zip(plan.nested, getattr(compiled, "nested", ()))]
        self.nested_guards = [[vector_expr(c) for c in n.guard] for n in plan.nested]
        self.deferred = [(s, backend.kernel(step.node.op)) for s, step in enumerate(plan.steps)
                         if isinstance(step.node.op, UDFOp) and s != plan.end]
        self.schedule_names = sorted({s.name for e in exprs for s in e.free_symbols()} - {var})
        self.schedules: dict[tuple, tuple] = {}
        self.schedule_key = _values_of(self.schedule_names)
        self.counter_names = sorted({s.name for e in (loop.start, loop.cond) for s in e.free_symbols()} - {var})
        self.counter_key = _values_of(self.counter_names)
        self.counter_lists: dict[tuple, list] = {}  # the counter values, by the values of counter_names
        self.guards = [[vector_expr(c) for c in step.guard] for step in plan.steps]
        self.branches = [[None if c is None else vector_expr(c) for c in step.conds]
                         if isinstance(step.node.op, MergeOp) else None for step in plan.steps]
        self.points = [compile_expr(seq(*step.execute.point)) for step in plan.steps]
        self.indexes = [[compile_expr(src.index) if src.index is not None else None for src in step.inputs]
                        for step in plan.steps]
        self.writer = {(step.node.id, j): k for k, step in enumerate(plan.steps) for j in range(len(step.node.shapes))}
        self.rows = {key: kinds[key] == "block" and row_major(plan.steps[self.writer[key]].execute.point, var)
                     for key in plan.written_back}  # written back as rows of one block where they can be
        self.sliced = {id(src): row_major(src.index.args, var) for step in plan.steps for src in step.inputs
                       if src.kind == GATHERED}  # read as one slice of a block store where it can be
        self.free_points = [(vector_expr(seq(*free.point)), [vector_expr(c) for c in guard]) for free, guard in
                            plan.frees]
        self.rows_slices = {(s, k): compile_expr(src.index.args[-1]) for s, step in enumerate(plan.steps)
                            for k, src in enumerate(step.inputs) if src.kind == ROWS}
        owner = {step.node.id: k for k, n in enumerate(plan.nested) for step in n.plan.steps}
        self.row_reads = {(s, k): (compile_expr(src.index.args[src.shift]), owner[src.key[0]],
                                   self.nested[owner[src.key[0]]].writer[src.key])
                          for s, step in enumerate(plan.steps) for k, src in enumerate(step.inputs) if src.kind == ROW}
        self.stacked_from = [{owner[src.key[0]] for _, src in n.inputs if src.kind in (STACKED, WINDOW)}
                             for n in plan.nested]
        counted = [(n.plan.loop.var, to_python(n.plan.loop.start), to_python(n.plan.loop.cond)) for n in plan.nested]
        self.counted_apart = [{w for w in self.stacked_from[k] if counted[w] != counted[k]}
                              for k in range(len(plan.nested))]  # the writers whose counters may differ from k's
        self.tiles = [[(owner[src.key[0]], _moving_slice(src.index, n.plan.loop.var), src.shift)
                       for _, src in n.inputs if src.kind == SLICED] for n in plan.nested]
        self.windows = [[(owner[src.key[0]], _moving_slice(src.index, n.plan.loop.var), src.shift)
                         for _, src in n.inputs if src.kind == WINDOW] for n in plan.nested]
        self.step_values = {s: compiled.step_values(s) for s in range(len(plan.steps)) if compiled.needs_args(s)}
        self.read_inputs = [(s, k, f"{s}.{k}", src) for s, step in enumerate(plan.steps)
                            for k, src in enumerate(step.inputs) if src.kind in (CLOSED, GATHERED)]
        self.keyed_by_dims = [bool({d.name for d in step.node.domain} & set(compiled.sized_by(s)))
                              for s, step in enumerate(plan.steps)]  # a step's static key reads its point's dims
        self.shapes = {s: _sizes(sdg, step) for s, step in enumerate(plan.steps) if s in plan.shaped}
        self.shaped_by = {s: _shaped_by(sdg, plan.steps[s], compiled.sized_by(s), var) for s in self.shapes}
        self.shape_checks: dict[tuple, tuple | None] = {}  # what _one_shape found, by what it depends on
        self.invariant = [{f"{s}.{k}" for s, step in enumerate(n.plan.steps) for k, src in enumerate(step.inputs)
                           if src.kind == GATHERED and not uses(src.index, var)} for n in plan.nested]
        self.nested_rows = {key: k for k, n in enumerate(plan.nested) for key in n.plan.written_back}
        self.uniform = [self._uniform(k, n) for k, n in enumerate(plan.nested)]
        self.reads = self._read_keys()  # the stores a launch reads, in the order of Launch.reads
        self.freed = self._freed_keys()  # the point stores a launch frees points of, in the order of Launch.frees
        self.order = {key: k for k, key in enumerate(self.reads)}
        self.check = None  # the EndCheck of the loop's dim, where it ends at run time (bound per run)
        self.lengths: dict = {}  # the rows of each block store's blocks (bound per run)
        self.zeros: dict = {}  # (shape, dtype) -> the device's zeros standing for an input no iteration reads
        self.ledger = None
        self.failed: set[tuple] = set()
        self.launched: list[tuple[int, float]] = []  # (iterations, wall seconds but compiles) of each launch
        self.name = f"over {var}"  # what the ledger calls it: the generated code's name where bound with one

    def _uniform(self, k: int, nested) -> bool:
        """Whether nested loop ``k`` reads nothing from stores per enclosing iteration (all it reads is
        computed by the enclosing loop's program or read once) and compiles the same at every one
        (no static key of its dims, no tile's shapes, no row reads or loops of its own)."""
        loop, given = self.nested[k], {name: src.kind for name, src in nested.inputs}
        return not (loop.row_reads or loop.plan.nested or loop.shapes or any(loop.keyed_by_dims)) and \
            GATHERED not in given.values() and \
            all(name in given or name in self.invariant[k] for _, _, name, src in loop.read_inputs
                if src.kind == GATHERED)

    def _read_keys(self) -> list[tuple[int, int]]:
        keys = [src.key for step in self.plan.steps for src in step.inputs if src.kind in (CLOSED, GATHERED)]
        keys += [key for key in self.plan.carried if key in self.plan.written_back and key not in self.nested_rows]
        keys += [key for nested in self.nested for key in nested.reads]
        return list(dict.fromkeys(keys))

    def _freed_keys(self) -> list[tuple[int, int]]:
        keys = [(free.node_id, j) for free, _ in self.plan.frees
                for j in free.freed(len(self.sdg.nodes[free.node_id].shapes))]
        keys = [key for key in keys if self.kinds[key] == "point"] + [key for n in self.nested for key in n.freed]
        return list(dict.fromkeys(keys))

    def bind(self, ledger, checks: dict | None = None, lengths: dict | None = None,
             name: str | None = None) -> DeviceLoop:
        """This loop (and its nested loops) on one run's ``ledger``, end checks (node ->
        :class:`~tempo.runtime.ends.EndCheck`) and block lengths (tensor -> rows of each block of its
        block store), with nothing launched yet; ``name``: the generated code's name of it (``D0``),
        which the memory report gives its buffers."""
        run = copy.copy(self)
        run.ledger, run.lengths, run.name = ledger, lengths or {}, name or self.name
        run.check = None if self.plan.end is None else checks[self.plan.steps[self.plan.end].node.id]
        run.nested = [nested.bind(ledger, checks, lengths) for nested in self.nested]
        run.schedules, run.failed, run.launched = {}, set(), []
        return run

    def launches(self, env: dict) -> Launches:
        """The launches of the loop at the bounds and enclosing counters ``env`` (see :class:`Launches`)."""
        return Launches(self, env)

    def _launches(self, env: dict, out: Launches):
        """Each launch, prepared just before it (one again where a slice it reads is not one view);
        ``out.ran`` is set where the device ran the whole loop."""
        if self.plan.end is not None:
            ran = yield from self._run_to_end(env)
            out.ran = ran
            return
        counters, runs, sels = self._schedule(env)
        if not counters:
            out.ran = True
            return
        if not self.plan.nested:
            launch = yield from self._attempt(lambda unsliced: self._prepared(
                env, counters, runs, sels, None, len(counters), unsliced))
            out.ran = launch is not None
            return
        if not self._rows_covered(env, counters, runs):
            return
        rows = max(1, min(self.chunk, len(counters) - 1))
        parts = [slice(0, 1)] + [slice(k, k + rows) for k in range(1, len(counters), rows)]
        ring = None
        for part in parts:  # the first iteration alone (its report comes early), then chunks of `rows`
            launch = yield from self._attempt(lambda unsliced: self._prepared(
                env, counters[part], [r[part] for r in runs], [None if x is None else x[part] for x in sels],
                ring, rows, unsliced))
            if launch is None:
                if part.start:
                    raise TempoError(f"the device loop over {self.var} cannot run its iterations from "
                                     f"{counters[part.start]} on as it ran the first")
                return
            ring = launch.ring
        out.ran = True

    def _run_to_end(self, env: dict):
        """Chunks of the check's ``k`` steps until the flag holds or the loop's last step (see the
        module docstring); whether they ran (False where the first cannot run on the device)."""
        every = self.check.chunk()
        rows, ring, ran, reads, last = None, None, 0, 0, None
        for counters in self._counters(env, every):
            if not counters:
                break
            rows = rows or len(counters)  # a loop shorter than k compiles its own length
            runs, sels = self._runs(env, counters)
            covered = not self.plan.nested or self._rows_covered(env, counters, runs)
            launch = None
            if covered:
                launch = yield from self._attempt(lambda unsliced: self._prepared(
                    env, counters, runs, sels, ring, rows, unsliced, ending=True))
            if launch is None:
                if ran:
                    raise TempoError(f"the device loop over {self.var} cannot run its steps from "
                                     f"{counters[0]} on as it ran the first")
                return False
            ring, ran, reads, last = launch.ring, ran + len(launch.envs), reads + 1, launch.envs[-1][self.var]
            if launch.ended:
                break
        if last is not None:
            outer = self.points[self.plan.end](dict(env, **{self.var: last}))[:-1]
            self.check.ended(outer, last + 1, ran, reads, rows)
        return True

    def _attempt(self, prepare):
        """Yield the launch ``prepare`` makes (again, reading row by row what it could not read as one
        view, until it reads all it needs); the launch that ran, or None (nothing changed)."""
        unsliced: set[int] = set()
        while True:
            launch = prepare(unsliced)
            if launch is None:
                return None
            yield launch
            if not launch.again:
                return launch if launch.ran else None
            unsliced |= launch.again

    def compile_seconds(self) -> float:
        """The wall seconds the backend spent compiling this loop ahead of its launches (0 where it
        compiles at the first launch)."""
        seconds = getattr(self.compiled, "compile_seconds", (0.0, 0.0))
        return seconds[0]

    def trips(self, env: dict) -> int:
        """How many iterations the loop runs with the bounds and enclosing counters ``env``."""
        return len(self._schedule(env)[0])

    def _prepared(self, env: dict, counters: list, runs, sels, ring, rows: int, unsliced: set,
                  ending: bool = False) -> Launch | None:
        """One launch over ``counters`` from the carry ``ring`` (None: its own initial carry), in a
        program of ``rows`` iterations (a loop with nested loops runs fewer in it); None where it
        cannot run."""
        started = time.perf_counter()
        envs = [dict(env, **{self.var: c}) for c in counters]
        reads = Reads(self.order, unsliced)
        prepared = self._prepare(env, envs, runs, sels, reads, initial=ring is None)
        if prepared is None:
            return None
        (_, keys), closed, xs, ring0 = prepared
        at = {name: np.int64(env[name]) for name in self.compiled.names}  # the bounds the body's expressions read
        closed = dict(closed, at=dict(at, **{self.var: np.int64(counters[0])}))
        key = (rows, keys)
        if key in self.failed:
            return None
        return Launch(self, key, envs, runs, (closed, xs, ring0 if ring is None else ring), reads.indices,
                      time.perf_counter() - started, ending, ring is None)

    def __call__(self, launch: Launch, values: list[list]) -> list | None:
        """Run ``launch`` with the values read for it (``values[k]``: those of the store
        ``self.reads[k]`` at ``launch.reads[k]``, None where it held none): the rows to write back,
        one array per tensor of ``plan.written_back``; None (nothing changed) where the launch cannot
        run or reads again. With ``launch.ending`` (the loop holds its dim's end check), only the
        launch's steps up to and including the first whose flag holds are written back."""
        launch.started, launch.compiled = time.perf_counter(), self.compile_seconds()
        try:
            closed, xs, ring0 = resolve(launch.inputs, values)
        except Unsliced as err:
            launch.again = err.args[0]
            return None
        nested = [closed[f"n{k}"] for k in range(len(self.plan.nested))]
        try:
            self._hold(launch, "carry", (ring0, [n["r"] for n in nested]))
            self._hold(launch, "inputs", (xs, [n["g"] for n in nested]))
            try:
                ring, ys = self.compiled(launch.key, len(launch.envs), closed, xs, ring0, not launch.first)
            except Exception as err:  # noqa: BLE001  the loop statement by statement says what failed, at its user's line
                self._release(launch.holding)
                self.failed.add(launch.key)
                warnings.warn(f"device loop {self.name} (the loop over {loop_dim(self.sdg, self.plan.loop)}) could not "
                              f"run as one device program ({type(err).__name__}: {err}): the loop runs statement "
                              f"by statement instead", stacklevel=2)
                return None
            self._hold(launch, "rows", ys)
            if self.plan.ending is not None:
                self._record_lengths(launch, self.backend.to_numpy(ys[-1]))
            if launch.ending:  # the chunk's flags, read on the host at once
                held = np.flatnonzero(self.backend.to_numpy(ys[-1]))
                kept, launch.ended = (int(held[0]) + 1, True) if held.size else (len(launch.envs), False)
                launch.envs, launch.runs = launch.envs[:kept], [r[:kept] for r in launch.runs]
                ys = [first_rows(y, kept) for y in ys[:-1]]
            written = len(self.plan.written_back)
            self._write_back_fits(ys[:written])
        except BudgetExceeded as over:
            self._release(launch.holding)
            if not launch.first:
                raise
            self.failed.add(launch.key)
            warnings.warn(f"device loop {self.name} (the loop over {loop_dim(self.sdg, self.plan.loop)}) would take the device tier to "
                          f"{over.live} bytes, over its budget of {over.budget}: the loop runs statement by "
                          f"statement instead", stacklevel=2)
            return None
        launch.ring, launch.ran = ring, True
        launch.kept = ys[written:]
        return ys[:written]

    def done(self, launch: Launch) -> None:
        """After ``launch``'s rows are written back and its points freed: its buffers leave the
        ledger, and its sinks and checkpoints are called."""
        self._release(launch.holding)
        self._call_deferred(launch.kept, launch.envs, launch.runs)
        ended = time.perf_counter()
        self.launched.append((len(launch.envs), launch.seconds + ended - launch.started
                              - self.compile_seconds() + launch.compiled))

    def _record_lengths(self, launch: Launch, lengths) -> None:
        """Record, in the end check of the nested loop over a dim that ends at run time, its length at each
        iteration of ``launch`` where it ran (``lengths``: the device's, read once per launch)."""
        nested, guards = self.nested[self.plan.ending], self.nested_guards[self.plan.ending]
        reads = 1
        for e, length in zip(launch.envs, lengths):
            counters = nested._schedule(e)[0]
            if counters and all(g(e) for g in guards):
                outer = nested.points[nested.plan.end](dict(e, **{nested.var: counters[0]}))[:-1]
                nested.check.ended(outer, int(length), int(length), reads, len(counters))
                reads = 0

    def _hold(self, launch: Launch, what: str, values) -> None:
        """Account the device bytes of ``values`` (a launch's carry, inputs or returned rows) in the
        ledger as ``device loop <name> <what>``, until :meth:`_release` (not where that goes over
        the device budget: :class:`~tempo.runtime.memory.BudgetExceeded` is raised)."""
        name, size = f"device loop {self.name} {what}", nbytes(values)
        try:
            self.ledger.add(name, size)
        except BudgetExceeded:
            self.ledger.add(name, -size)
            raise
        launch.holding.append((name, size))

    def _write_back_fits(self, rows: list) -> None:
        """Raise :class:`~tempo.runtime.memory.BudgetExceeded` where writing ``rows`` back, each
        counted as new bytes of its store, would go over the device budget beside the launch's buffers."""
        budget = self.ledger.budget
        live = self.ledger.live["device"] + nbytes(rows)
        if budget is not None and live > budget:
            raise BudgetExceeded(budget, live, {k: v for k, v in self.ledger.by_store.items() if v > 0})

    def _release(self, holding: list[tuple[str, int]]) -> None:
        for name, size in holding:
            self.ledger.add(name, -size)

    # ----- after the launch -----
    def _block(self, key: tuple, envs: list[dict], runs) -> tuple | None:
        """Where the rows of ``key`` a launch over ``envs`` returns go in one write, ``(outer, start)``:
        where every iteration wrote one and they lie in one block of its block store; else None."""
        s = self.writer[key]
        if not self.rows[key] or not runs[s].all():
            return None
        first = self.points[s](envs[0])
        length = self.lengths[key]
        return (first[:-1], first[-1]) if first[-1] // length == (first[-1] + len(envs) - 1) // length else None

    def _each(self, key: tuple, envs: list[dict], runs, values) -> list[tuple]:
        """(point, row) of each iteration that wrote a row of ``key``."""
        s = self.writer[key]
        return [(self.points[s](e), row) for e, ran, row in zip(envs, runs[s], self.compiled.unstack(values)) if ran]

    def _call_deferred(self, kept, envs: list[dict], runs) -> None:
        """Call the loop's sinks and checkpoints at every iteration where they run, in order."""
        calls = []
        for (s, kernel), values in zip(self.deferred, kept):
            rows = [self.backend.to_numpy(v) for v in values]
            for t, (e, ran) in enumerate(zip(envs, runs[s])):
                if ran:
                    calls.append((t, s, kernel, [r[t] for r in rows], self._dim_env(s, e, e)))
        for _, s, kernel, inputs, at in sorted(calls, key=lambda c: (c[0], c[1])):
            kernel(inputs, at, tuple(at[d.name] for d in self.plan.steps[s].node.domain))

    def _frees(self, envs: list[dict], out: dict) -> dict:
        """Into ``out``, per point store, the points the loop (and its nested loops) frees over ``envs``."""
        if envs:
            self._frees_over({name: np.array([e[name] for e in envs], dtype=np.int64) for name in envs[0]},
                             len(envs), out)
        return out

    def _frees_over(self, flat: dict, n: int, out: dict) -> None:
        """:meth:`_frees` over ``n`` iterations whose bounds and counters ``flat`` holds as arrays, each
        free's guards and point evaluated over them at once, a nested loop's over the counters of
        every iteration where it runs."""
        for (free, _), (point, guards) in zip(self.plan.frees, self.free_points):
            held = held_at(guards, flat, n)
            if not held.any():
                continue
            coords = [_held_values(p, held, n) for p in point(flat)]
            at = list(zip(*coords)) if coords else [()] * int(held.sum())
            for j in free.freed(len(self.sdg.nodes[free.node_id].shapes)):
                if self.kinds[(free.node_id, j)] == "point":
                    out.setdefault((free.node_id, j), []).extend(at)
        for nested, guards in zip(self.nested, self.nested_guards):
            rows = np.flatnonzero(held_at(guards, flat, n))
            counters = [nested._counters_at({name: int(v[i]) for name, v in flat.items()}) for i in rows]
            lengths = [len(c) for c in counters]
            if sum(lengths):
                inner = {name: np.repeat(v[rows], lengths) for name, v in flat.items()}
                inner[nested.var] = np.array([c for cs in counters for c in cs], dtype=np.int64)
                nested._frees_over(inner, sum(lengths), out)


def _held_values(value, held: np.ndarray, n: int) -> list:
    """A point's coordinate over ``n`` iterations (an int, an array or a :class:`Span` of them) at those
    ``held`` picks, as ints and slices."""
    if isinstance(value, Span):
        starts, stops = (np.broadcast_to(np.asarray(v, dtype=np.int64), (n,))[held].tolist()
                         for v in (value.start, value.stop))
        return [slice(a, b) for a, b in zip(starts, stops)]
    return np.broadcast_to(np.asarray(value, dtype=np.int64), (n,))[held].tolist()


def _values_of(names: list[str]):
    """``env -> tuple``: the values of ``names`` in an environment (a cache's key)."""
    if not names:
        return lambda env: ()
    get = operator.itemgetter(*names)
    return get if len(names) > 1 else lambda env: (get(env),)


def _moving_slice(index, var: str):
    """The compiled slice of ``index`` (a tile's read) that moves with the counter ``var``."""
    (arg,) = [a for a in index.args if a.op == "slice" and uses(a, var)]
    return compile_expr(arg)


def _sizes(sdg: SDG, step) -> list:
    """Functions of a kernel's environment giving each size of step's shapes and its inputs' shapes
    (:meth:`DeviceLoop._one_shape`)."""
    shapes = [*step.node.shapes, *(sdg.read_shape(e) for e in sdg.in_edges(step.node.id))]
    return [(lambda env, d=d: d) if isinstance(d, int) else compile_expr(d) for shape in shapes for d in shape]


def _shaped_by(sdg: SDG, step, sized_by: tuple, var: str) -> tuple[str, ...]:
    """The names of the bounds and enclosing counters the shapes of ``step`` and the sizes its compiled
    form reads (``sized_by``) depend on, but the loop's own counter ``var``."""
    shapes = [*step.node.shapes, *(sdg.read_shape(e) for e in sdg.in_edges(step.node.id))]
    used = {x.name for shape in shapes for d in shape if not isinstance(d, int) for x in d.free_symbols()}
    dims = {d.name: p for d, p in zip(step.node.domain, step.execute.point)}
    names = {n for n in used | set(sized_by) if n not in dims}
    names |= {x.name for n in used | set(sized_by) if n in dims for x in dims[n].free_symbols()}
    return tuple(sorted(names - {var}))
