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
takes, and what the islands' host steps compute (symbol values,
counter-based random numbers, spatial index starts). Frees inside the
loop drop points of stores after it. :class:`DeviceLoop` does that host
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
dim's :class:`~tempo.runtime.ends.EndCheck` records.

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
import functools
import time
import warnings

import numpy as np

from tempo.errors import TempoError
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge
from tempo.plan.device_loops import (CARRIED, CLOSED, GATHERED, LOCAL, ROW, ROWS, SLICED, STACKED, WINDOW,
                                     LoopPlan, Source, row_major)
from tempo.runtime.launches import (Later, Launch, Launches, Reads, Unsliced, first_rows, nbytes, one_view,
                                    resolve)
from tempo.runtime.memory import BudgetExceeded
from tempo.runtime.profile import loop_dim
from tempo.symbolic.affine import uses
from tempo.symbolic.evaluate import compile_expr, shape_at
from tempo.symbolic.expr import seq


class DeviceLoop:
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
        self.nested_guards = [[compile_expr(c) for c in n.guard] for n in plan.nested]
        self.deferred = [(s, backend.kernel(step.node.op)) for s, step in enumerate(plan.steps)
                         if isinstance(step.node.op, UDFOp) and s != plan.end]
        self.schedule_names = sorted({s.name for e in exprs for s in e.free_symbols()} - {var})
        self.schedules: dict[tuple, tuple] = {}
        self.guards = [[compile_expr(c) for c in step.guard] for step in plan.steps]
        self.branches = [[None if c is None else compile_expr(c) for c in step.conds]
                         if isinstance(step.node.op, MergeOp) else None for step in plan.steps]
        self.points = [compile_expr(seq(*step.execute.point)) for step in plan.steps]
        self.indexes = [[compile_expr(src.index) if src.index is not None else None for src in step.inputs]
                        for step in plan.steps]
        self.writer = {(step.node.id, j): k for k, step in enumerate(plan.steps) for j in range(len(step.node.shapes))}
        self.rows = {key: kinds[key] == "block" and row_major(plan.steps[self.writer[key]].execute.point, var)
                     for key in plan.written_back}  # written back as rows of one block where they can be
        self.sliced = {id(src): row_major(src.index.args, var) for step in plan.steps for src in step.inputs
                       if src.kind == GATHERED}  # read as one slice of a block store where it can be
        self.free_points = [(compile_expr(seq(*free.point)), [compile_expr(c) for c in guard]) for free, guard in
                            plan.frees]
        self.rows_slices = {(s, k): compile_expr(src.index.args[-1]) for s, step in enumerate(plan.steps)
                            for k, src in enumerate(step.inputs) if src.kind == ROWS}
        owner = {step.node.id: k for k, n in enumerate(plan.nested) for step in n.plan.steps}
        self.row_reads = {(s, k): (compile_expr(src.index.args[src.shift]), owner[src.key[0]],
                                   self.nested[owner[src.key[0]]].writer[src.key])
                          for s, step in enumerate(plan.steps) for k, src in enumerate(step.inputs) if src.kind == ROW}
        self.stacked_from = [{owner[src.key[0]] for _, src in n.inputs if src.kind in (STACKED, WINDOW)}
                             for n in plan.nested]
        self.tiles = [[(owner[src.key[0]], _moving_slice(src.index, n.plan.loop.var), src.shift)
                       for _, src in n.inputs if src.kind == SLICED] for n in plan.nested]
        self.windows = [[(owner[src.key[0]], _moving_slice(src.index, n.plan.loop.var), src.shift)
                         for _, src in n.inputs if src.kind == WINDOW] for n in plan.nested]
        self.step_values = {s: compiled.step_values(s) for s in range(len(plan.steps)) if compiled.needs_args(s)}
        self.shapes = {s: _sizes(sdg, step) for s, step in enumerate(plan.steps) if s in plan.shaped}
        self.shaped_by = {s: _shaped_by(sdg, plan.steps[s], compiled.sized_by(s), var) for s in self.shapes}
        self.shape_checks: dict[tuple, tuple | None] = {}  # what _one_shape found, by what it depends on
        self.invariant = [{f"{s}.{k}" for s, step in enumerate(n.plan.steps) for k, src in enumerate(step.inputs)
                           if src.kind == GATHERED and not uses(src.index, var)} for n in plan.nested]
        self.nested_rows = {key: k for k, n in enumerate(plan.nested) for key in n.plan.written_back}
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
        key = (rows, keys)
        if key in self.failed:
            return None
        if ending:
            xs = dict(xs, end=runs[self.plan.end])
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
                ring, ys = self.compiled(launch.key, len(launch.envs), closed, xs, ring0)
            except Exception:  # noqa: BLE001  the loop statement by statement says what failed, at its user's line
                self._release(launch.holding)
                self.failed.add(launch.key)
                return None
            self._hold(launch, "rows", ys)
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

    def _rows_covered(self, env: dict, counters: list, runs: list) -> bool:
        """Whether every read of a nested loop's rows reads the rows the loop wrote in its iteration
        (where the reading step runs: a learner whose last update nothing reads skips the last one)."""
        for (s, k), stop in self.rows_slices.items():
            src = self.plan.steps[s].inputs[k]
            nested = next(n for n, p in zip(self.nested, self.plan.nested)
                          if any(step.node.id == src.key[0] for step in p.plan.steps))
            writer = nested.writer[src.key]
            for c in (c for c, ran in zip(counters, runs[s]) if ran):
                e = dict(env, **{self.var: c})
                inner, inner_runs, _ = nested._schedule(e)
                wanted = stop(e)
                if not inner or not inner_runs[writer].all() or \
                        (wanted.start, wanted.stop) != (inner[0], inner[-1] + 1) or wanted.step not in (None, 1):
                    return False
        return True

    # ----- the host's part, before the launch -----
    def _schedule(self, env: dict):
        """The loop's counter values, whether each step runs at each, and each merge's branch (cached)."""
        key = tuple(env[n] for n in self.schedule_names)
        cached = self.schedules.get(key)
        if cached is not None:
            return cached
        counters = next(self._counters(env, None))
        cached = self.schedules[key] = (counters, *self._runs(env, counters))
        return cached

    def _counters(self, env: dict, rows: int | None):
        """The loop's counter values in lists of ``rows`` (None: one list of them all, empty where
        the loop runs no iteration)."""
        local = dict(env)
        local[self.var] = self.start(local)
        while True:
            counters = []
            while (rows is None or len(counters) < rows) and self.cond(local):
                counters.append(local[self.var])
                local[self.var] += 1
            yield counters
            if not counters or rows is None:
                return

    def _runs(self, env: dict, counters: list):
        """Whether each step runs at each of ``counters``, and each merge's branch there."""
        at = [dict(env, **{self.var: c}) for c in counters]
        runs, sels = [], []
        for guards, branches in zip(self.guards, self.branches):
            runs.append(np.array([all(g(e) for g in guards) for e in at], dtype=bool))
            sels.append(None if branches is None else
                        np.array([next((k for k, b in enumerate(branches) if b is None or b(e)), -1) for e in at],
                                 dtype=np.int32))
        return runs, sels

    def _selects(self) -> dict[int, None]:
        """Every merge step of several branches traced as a select (:meth:`_branches` with no branch
        fixed): the loop launched by itself, whose first launch and later ones then share one program."""
        return {s: None for s, step in enumerate(self.plan.steps)
                if isinstance(step.node.op, MergeOp) and len(step.inputs) > 1}

    def _branches(self, schedules: list) -> dict[int, int | None]:
        """Per merge step of several branches of a nested loop, the branch it takes at every iteration
        where it runs in ``schedules`` (``(runs, sels)`` of each part of a launch), None where that
        varies: a merge whose branch is the same throughout a launch is traced as that branch alone (a
        carried buffer passes through it as it is, where a select would copy it)."""
        out = {}
        for s, step in enumerate(self.plan.steps):
            if isinstance(step.node.op, MergeOp) and len(step.inputs) > 1:
                taken = np.concatenate([sels[s][runs[s]] for runs, sels in schedules])
                out[s] = int(taken[0]) if taken.size and taken[0] >= 0 and (taken == taken[0]).all() else None
        return out

    def _prepare(self, env: dict, envs: list[dict], runs, sels, reads: Reads, provided=frozenset(),
                 initial: bool = True, branches: dict | None = None, args: dict | None = None):
        """The compiled loop's static key, its inputs, per-iteration values and initial carry, what
        they take from stores asked of ``reads`` (``provided``: the names of closed inputs the enclosing
        loop's program computes; ``initial``: False where the carry comes from the previous launch;
        ``branches``: :meth:`_branches` over the whole launch, where the loop is nested; ``args``: per
        step, its index forms and host values over ``envs``, where the enclosing loop computed them)."""
        shapes = [self._one_shape(s, env, envs, runs[s]) for s in self.shapes]  # before the rest of the work
        if None in shapes:
            return None
        closed, gathered, sel_xs, arg_xs, keys = {}, {}, {}, {}, []
        branches = self._selects() if branches is None else branches
        for s, step in enumerate(self.plan.steps):
            ran = runs[s]
            for k, src in enumerate(step.inputs):
                wanted = _wanted(runs, sels, f"{s}.{k}")
                if src.kind in (CLOSED, GATHERED) and f"{s}.{k}" in provided:
                    continue
                at = self._dim_env(s, env, envs[0]) if s in self.shapes else env  # a tile's shape: at its dims
                if src.kind == CLOSED:
                    closed[f"{s}.{k}"] = (reads.slot(src.key, self.indexes[s][k](env)) if wanted.any()
                                          else self._zeros(src.edge, at))
                elif src.kind == GATHERED:
                    gathered[f"{s}.{k}"] = self._gather(src, self.indexes[s][k], envs, wanted, at, reads)
            if s in branches and branches[s] is None:
                sel_xs[str(s)] = sels[s]
            first = int(np.argmax(ran)) if ran.any() else 0
            dims = self._dim_env(s, env, envs[first])
            keys.append(self.compiled.static_key(s, dims))
            if s in branches:
                keys.append(branches[s])
            if self.compiled.needs_args(s):
                if not ran.any() and not self.plan.nested and self.plan.end is None:
                    return None
                formed = args[s] if args is not None else self._step_args(s, env, envs, ran)
                if formed is None:
                    return None
                keys.append(formed[0])
                arg_xs[str(s)] = formed[1]
        ring0 = {f"{n}_{j}": tuple(self._initial(n, j, env, envs[0], back, reads) for back in range(1, depth + 1))
                 for (n, j), depth in self.plan.carried.items()} if initial else None
        xs = {"sel": sel_xs, "g": gathered, "a": arg_xs}
        if self.row_reads:
            rows = self._row_positions(envs, runs)
            if rows is None:
                return None
            xs["row"] = rows
        for k, nested in enumerate(self.plan.nested):
            inner = self._prepare_nested(k, nested, envs, reads)
            if inner is None:
                return None
            keys.append(inner[0])
            closed[f"n{k}"], xs[f"n{k}"] = inner[1], inner[2]
        if shapes:  # after every key the compiled loop reads: the tiles' shapes, one per launch
            keys.append(tuple(shapes))
        return (len(envs), tuple(keys)), closed, xs, ring0

    def _prepare_nested(self, k: int, nested, envs: list[dict], reads: Reads):
        """A nested loop's static key, the inputs it reads once (its closed inputs read once by the
        enclosing loop too, its initial carry) and its per-iteration values of every enclosing iteration
        (stacked); None where the iterations differ in what compiles."""
        loop = self.nested[k]
        provided = {name for name, src in nested.inputs if src.kind in (LOCAL, CARRIED, STACKED, SLICED, WINDOW)}
        per_iteration = {name for name, src in nested.inputs if src.kind == GATHERED}
        writers = {self.nested[w] for w in self.stacked_from[k]}
        keys, once, stacked, first = set(), None, [], None
        schedules = [loop._schedule(e) for e in envs]
        branches = loop._branches([schedule[1:] for schedule in schedules])
        args = self._nested_args(loop, envs, schedules)
        if args is None:
            return None
        for o, e in enumerate(envs):
            counters, runs, sels = loop._schedule(e)
            if not counters or any(w._schedule(e)[0] != counters for w in writers) or \
                    not self._tiled(k, e, loop.var, counters) or not self._windowed(k, e, loop.var, counters):
                return None
            wanted = {name: _wanted(runs, sels, name) for name in self.invariant[k]}
            first = first or wanted
            if any((wanted[n] & ~first[n]).any() for n in wanted):
                return None  # read where the first iteration, whose values serve every one, does not
            read = provided if once is None else provided | once["c"].keys() | self.invariant[k]  # read once
            prepared = loop._prepare(e, [dict(e, **{loop.var: c}) for c in counters], runs, sels, reads, read,
                                     initial=once is None, branches=branches, args=args[o])
            if prepared is None:
                return None
            key, closed, xs, ring0 = prepared
            keys.add(key)
            if once is None:  # what is the same at every iteration of this loop, read once
                once = {"c": {n: v for n, v in closed.items() if n not in per_iteration}, "r": ring0,
                        "g": {n: v for n, v in xs["g"].items() if n in self.invariant[k]}}
            xs = dict(xs, g={n: v for n, v in xs["g"].items() if n not in self.invariant[k]})
            stacked.append({"x": xs, "g": {n: closed[n] for n in per_iteration}})
        if len(keys) != 1:
            return None
        return keys.pop(), once, self._stack(stacked)

    def _step_args(self, s: int, env: dict, envs: list[dict], ran: np.ndarray) -> tuple[tuple, dict] | None:
        """Step ``s``'s index forms and host values over ``envs`` (those of its first iteration where it
        runs at an iteration where it does not), evaluated on arrays of the counters at once."""
        counters = _standing_in(np.array([e[self.var] for e in envs], dtype=np.int64), ran)
        return self.step_values[s].over(dict(env, **{self.var: counters}), len(envs))

    def _nested_args(self, loop: DeviceLoop, envs: list[dict], schedules: list) -> list[dict] | None:
        """Per enclosing iteration of ``envs``, nested ``loop``'s :meth:`_step_args` of each step,
        evaluated over the counters of every iteration at once; None where the iterations' trip
        counts or a step's index forms differ (the launch then cannot run)."""
        trips = {len(counters) for counters, _, _ in schedules}
        if len(trips) != 1 or not trips.pop():
            return None
        outer = np.repeat(np.array([e[self.var] for e in envs], dtype=np.int64), len(schedules[0][0]))
        out = [{} for _ in envs]
        for s, values in loop.step_values.items():
            inner = np.concatenate([_standing_in(np.array(counters, dtype=np.int64), runs[s])
                                    for counters, runs, _ in schedules])
            formed = values.over(dict(envs[0], **{self.var: outer, loop.var: inner}), len(inner))
            if formed is None:
                return None
            for o, row in enumerate(out):
                row[s] = (formed[0], {name: value.reshape((len(envs), -1) + value.shape[1:])[o]
                                      for name, value in formed[1].items()})
        return out

    def _one_shape(self, s: int, env: dict, envs: list[dict], ran) -> tuple | None:
        """Step ``s``'s shapes and static sizes, those of a tile (:attr:`LoopPlan.shaped`), where they are
        one at every iteration where it runs (at every iteration where it runs at none: the launch traces
        it all the same, in the same program as where it runs); else None (a partial last tile)."""
        running = [e for e, r in zip(envs, ran) if r] or list(envs)
        key = (s, tuple(env.get(n) for n in self.shaped_by[s]), tuple(e[self.var] for e in running))
        if key not in self.shape_checks:
            self.shape_checks[key] = self._shape_of(s, env, running)
        return self.shape_checks[key]

    def _shape_of(self, s: int, env: dict, running: list[dict]) -> tuple | None:
        seen = set()
        for e in running[:1] + running[-1:] + running[1:-1]:  # a partial last tile fails at once
            dims = self._dim_env(s, env, e)
            seen.add((tuple(f(dims) for f in self.shapes[s]), self.compiled.static_sizes(s, dims)))
            if len(seen) > 1:
                return None
        return seen.pop()

    def _tiled(self, k: int, env: dict, var: str, counters: list) -> bool:
        """Whether nested loop ``k``'s tile reads (``sliced``) of another nested loop's rows, over
        ``counters``, read its rows in order, a tile of the same rows at every iteration."""
        for writer, stop, rows in self.tiles[k]:
            wrote = self.nested[writer]._schedule(env)[0]
            slices = [stop(dict(env, **{var: c})) for c in counters]
            if len(wrote) != rows * len(counters) or \
                    any((x.start, x.stop, x.step) != (wrote[rows * n], wrote[rows * n] + rows, None)
                        for n, x in enumerate(slices)) or wrote != list(range(wrote[0], wrote[0] + len(wrote))):
                return False
        return True

    def _windowed(self, k: int, env: dict, var: str, counters: list) -> bool:
        """Whether nested loop ``k``'s window reads (``window``) of another nested loop's rows, over
        ``counters`` (the writer's too), read ``n`` rows from each counter on, fewer only at the last row."""
        for writer, stop, n in self.windows[k]:
            if counters != list(range(counters[0], counters[0] + len(counters))):
                return False
            end = counters[-1] + 1
            for c in counters:
                x = stop(dict(env, **{var: c}))
                if (x.start, x.stop, x.step) != (c, min(c + n, end), None):
                    return False
        return True

    def _row_positions(self, envs: list[dict], runs) -> dict | None:
        """Per iteration, the row of a nested loop's rows each ``row`` read picks (None where one is
        outside the rows the loop ran, at an iteration where the reading step runs)."""
        out = {}
        for (s, k), (point, nested, writer) in self.row_reads.items():
            rows = []
            for e, ran in zip(envs, runs[s]):
                counters, inner_runs, _ = self.nested[nested]._schedule(e)
                row = point(e) - counters[0] if counters else -1
                if ran and not (0 <= row < len(counters) and inner_runs[writer][row]):
                    return None
                rows.append(max(row, 0))
            out[f"{s}.{k}"] = np.array(rows, dtype=np.int32)
        return out

    def _stack(self, trees: list):
        """Dicts of the same keys, their leaves stacked along a new leading axis once read (on the
        host: one transfer to the device at the launch)."""
        first = trees[0]
        if isinstance(first, dict):
            return {name: self._stack([t[name] for t in trees]) for name in first}
        return Later(self._host_stack, *trees)

    def _host_stack(self, *values):
        return np.stack([v if isinstance(v, np.ndarray) else self.backend.to_numpy(v) for v in values])

    def _dim_env(self, s: int, env: dict, at: dict) -> dict:
        """What a kernel of step ``s`` sees: the bounds and its point's dims."""
        point = self.points[s](at)
        return dict(env, **{d.name: p for d, p in zip(self.plan.steps[s].node.domain, point)})

    def _zeros(self, edge: Edge, env: dict):
        """Zeros of the shape and dtype ``edge`` reads, made once (a device array is never written)."""
        key = (tuple(shape_at(self.sdg.read_shape(edge), env)), self.sdg.nodes[edge.src].dtypes[edge.src_out])
        zeros = self.zeros.get(key)
        if zeros is None:
            zeros = self.zeros[key] = self.backend.cast(np.zeros(*key), key[1])
        return zeros

    def _gather(self, src: Source, index, envs: list[dict], wanted, env: dict, reads: Reads):
        """The values of ``src`` at every iteration, stacked once read: consecutive rows of one block
        as one view where they are (rows no step reads are never used), else row by row."""
        sliced = self.kinds[src.key] == "block" and self.sliced[id(src)] and id(src) not in reads.unsliced
        first = index(envs[0]) if sliced else None
        if first is not None and first[-1] >= 0:
            at = first[:-1] + (slice(first[-1], first[-1] + len(envs)),)
            return Later(functools.partial(one_view, id(src)), reads.slot(src.key, at, optional=True))
        values = [reads.slot(src.key, index(e)) if w else None for e, w in zip(envs, wanted)]
        zeros = None if wanted.any() else self._zeros(src.edge, env)
        return Later(functools.partial(self._stacked, src, zeros), *values)

    def _stacked(self, src: Source, zeros, *values):
        filler = next((v for v in values if v is not None), zeros)
        values = [filler if v is None else v for v in values]
        if self.plan.nested:  # on the host: a launch's iterations vary in number, the device stack's compile with it
            return self._host_stack(*values)
        dtype = self.sdg.nodes[src.key[0]].dtypes[src.key[1]]
        return self.backend.stack(values, (len(values),), dtype)

    def _initial(self, n: int, j: int, env: dict, first: dict, back: int, reads: Reads):
        """The carried value of ``back`` iterations before the first: from the store where a
        previous launch wrote it back, else zeros (no run reads it)."""
        node = self.sdg.nodes[n]
        if (n, j) in self.nested_rows:  # a nested loop's rows, one per iteration of it
            rows = len(self.nested[self.nested_rows[(n, j)]]._schedule(first)[0])
            shape = (rows, *shape_at(node.shapes[j], env))
            return self.backend.cast(np.zeros(shape, node.dtypes[j]), node.dtypes[j])
        zeros = self.backend.cast(np.zeros(shape_at(node.shapes[j], env), node.dtypes[j]), node.dtypes[j])
        if (n, j) not in self.plan.written_back:
            return zeros
        at = dict(first, **{self.var: first[self.var] - back})
        stored = reads.slot((n, j), self.points[self.writer[(n, j)]](at), optional=True)
        return Later(functools.partial(self._cast_or, zeros, node.dtypes[j]), stored)

    def _cast_or(self, zeros, dtype: str, value):
        return zeros if value is None else self.backend.cast(value, dtype)

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
        for (free, _), (point, guards) in zip(self.plan.frees, self.free_points):
            outs = [j for j in free.freed(len(self.sdg.nodes[free.node_id].shapes))
                    if self.kinds[(free.node_id, j)] == "point"]
            for e in envs:
                if all(g(e) for g in guards):
                    at = point(e)
                    for j in outs:
                        out.setdefault((free.node_id, j), []).append(at)
        for nested, guards in zip(self.nested, self.nested_guards):
            for e in envs:
                if all(g(e) for g in guards):
                    inner, _, _ = nested._schedule(e)
                    nested._frees([dict(e, **{nested.var: c}) for c in inner], out)
        return out


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


def _standing_in(counters: np.ndarray, ran: np.ndarray) -> np.ndarray:
    """``counters`` with the first where a step runs standing in at those where it does not."""
    return np.where(ran, counters, counters[int(np.argmax(ran)) if ran.any() else 0])


def _wanted(runs: list, sels: list, name: str) -> np.ndarray:
    """At which iterations the input ``"s.k"`` (step ``s``'s input ``k``) is read: where the step runs
    and, for a merge, takes that branch."""
    s, k = map(int, name.split("."))
    return runs[s] if sels[s] is None else runs[s] & (sels[s] == k)
