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
work around the backend's compiled loop; it answers ``False`` (and the
generated code runs the loop statement by statement instead) where a
launch finds what the compiled loop cannot do.

A nested loop's host work is done for every iteration of the enclosing
loop before the launch, and stacked (its per-iteration values, its gathered
values, those the same at every iteration read once per launch); a
statement after it reads its rows only where they cover the slice it reads,
or one row only where the loop ran it, and a nested loop reads another's
rows row by row only where both run over the same counters. Sinks and
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
"""
from __future__ import annotations

import copy
import time

import numpy as np

from tempo.errors import TempoError
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge
from tempo.plan.device_loops import CARRIED, CLOSED, GATHERED, LOCAL, ROW, ROWS, STACKED, LoopPlan, Source
from tempo.symbolic.affine import counter, uses
from tempo.symbolic.evaluate import compile_expr, shape_at
from tempo.symbolic.expr import seq
from tempo.symbolic.simplify import simplify


class DeviceLoop:
    """Runs one planned loop as one launch of the backend's compiled loop (see the module docstring).

    Called by the generated code with the bounds and the enclosing loops' counters; returns
    False, having changed nothing, where this launch needs the statement-by-statement loop.
    Made once per program (its expressions compiled then); :meth:`bind` gives it one run's
    stores and ledger.
    """

    chunk = 16  # the most iterations of a loop over iterations (one with nested loops) per launch

    def __init__(self, plan: LoopPlan, compiled, sdg: SDG, backend, stores: dict | None = None, ledger=None):
        self.plan, self.compiled, self.sdg, self.stores, self.backend, self.ledger = \
            plan, compiled, sdg, stores, backend, ledger
        loop, var = plan.loop, plan.loop.var
        self.var, self.start, self.cond = var, compile_expr(loop.start), compile_expr(loop.cond)
        exprs = [loop.start, loop.cond] + [c for step in plan.steps for c in (*step.guard, *step.conds)
                                           if c is not None] + [c for _, guard in plan.frees for c in guard]
        exprs += [c for nested in plan.nested for c in nested.guard]
        self.nested = [DeviceLoop(n.plan, inner, sdg, backend, stores, ledger)
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
        self.rows = {key: _row_major(plan.steps[self.writer[key]].execute.point, var) for key in plan.written_back}
        self.sliced = {id(src): _row_major(src.index.args, var) for step in plan.steps for src in step.inputs
                       if src.kind == GATHERED}  # read as one slice of a block store where it can be
        self.free_points = [(compile_expr(seq(*free.point)), [compile_expr(c) for c in guard]) for free, guard in
                            plan.frees]
        self.rows_slices = {(s, k): compile_expr(src.index.args[-1]) for s, step in enumerate(plan.steps)
                            for k, src in enumerate(step.inputs) if src.kind == ROWS}
        owner = {step.node.id: k for k, n in enumerate(plan.nested) for step in n.plan.steps}
        self.row_reads = {(s, k): (compile_expr(src.index.args[src.shift]), owner[src.key[0]],
                                   self.nested[owner[src.key[0]]].writer[src.key])
                          for s, step in enumerate(plan.steps) for k, src in enumerate(step.inputs) if src.kind == ROW}
        self.stacked_from = [{owner[src.key[0]] for _, src in n.inputs if src.kind == STACKED} for n in plan.nested]
        self.invariant = [{f"{s}.{k}" for s, step in enumerate(n.plan.steps) for k, src in enumerate(step.inputs)
                           if src.kind == GATHERED and not uses(src.index, var)} for n in plan.nested]
        self.nested_rows = {key: k for k, n in enumerate(plan.nested) for key in n.plan.written_back}
        self.check = None  # the EndCheck of the loop's dim, where it ends at run time (bound per run)
        self.failed: set[tuple] = set()
        self.launched: list[tuple[int, float]] = []  # (iterations, wall seconds but compiles) of each launch
        self.name = f"over {var}"  # what the ledger calls it: the generated code's name where bound with one

    def bind(self, stores: dict, ledger, checks: dict | None = None, name: str | None = None) -> DeviceLoop:
        """This loop (and its nested loops) on one run's ``stores``, ``ledger`` and end checks
        (node -> :class:`~tempo.runtime.ends.EndCheck`), with nothing launched yet; ``name``: the
        generated code's name of it (``D0``), which the memory report gives its buffers."""
        run = copy.copy(self)
        run.stores, run.ledger, run.name = stores, ledger, name or self.name
        run.check = None if self.plan.end is None else checks[self.plan.steps[self.plan.end].node.id]
        run.nested = [nested.bind(stores, ledger, checks) for nested in self.nested]
        run.schedules, run.failed, run.launched = {}, set(), []
        return run

    def __call__(self, env: dict) -> bool:
        if self.plan.end is not None:
            return self._run_to_end(env)
        counters, runs, sels = self._schedule(env)
        if not counters:
            return True
        if not self.plan.nested:
            prepared = self._prepared(env, counters, runs, sels, True, len(counters))
            return prepared is not None and self._launch(prepared, None) is not None
        if not self._rows_covered(env, counters, runs):
            return False
        rows = max(1, min(self.chunk, len(counters) - 1))
        parts = [slice(0, 1)] + [slice(k, k + rows) for k in range(1, len(counters), rows)]
        ring = None
        for part in parts:  # the first iteration alone (its report comes early), then chunks of `rows`
            prepared = self._prepared(env, counters[part], [r[part] for r in runs],
                                      [None if x is None else x[part] for x in sels], ring is None, rows)
            ring = None if prepared is None else self._launch(prepared, ring)
            if ring is None:
                if part.start:
                    raise TempoError(f"the device loop over {self.var} cannot run its iterations from "
                                     f"{counters[part.start]} on as it ran the first")
                return False
        return True

    def _run_to_end(self, env: dict) -> bool:
        """Chunks of the check's ``k`` steps until the flag holds or the loop's last step (see the
        module docstring); False where the first chunk cannot run on the device."""
        every = self.check.chunk()
        rows, ring, ran, reads, last = None, None, 0, 0, None
        for counters in self._counters(env, every):
            if not counters:
                break
            rows = rows or len(counters)  # a loop shorter than k compiles its own length
            runs, sels = self._runs(env, counters)
            covered = not self.plan.nested or self._rows_covered(env, counters, runs)
            prepared = self._prepared(env, counters, runs, sels, ring is None, rows) if covered else None
            done = None if prepared is None else self._launch(prepared, ring, ending=True)
            if done is None:
                if ran:
                    raise TempoError(f"the device loop over {self.var} cannot run its steps from "
                                     f"{counters[0]} on as it ran the first")
                return False
            ring, kept, ended = done
            ran, reads, last = ran + kept, reads + 1, counters[kept - 1]
            if ended:
                break
        if last is not None:
            outer = self.points[self.plan.end](dict(env, **{self.var: last}))[:-1]
            self.check.ended(outer, last + 1, ran, reads, rows)
        return True

    def compile_seconds(self) -> float:
        """The wall seconds the backend spent compiling this loop ahead of its launches (0 where it
        compiles at the first launch)."""
        seconds = getattr(self.compiled, "compile_seconds", (0.0, 0.0))
        return seconds[0]

    def trips(self, env: dict) -> int:
        """How many iterations the loop runs with the bounds and enclosing counters ``env``."""
        return len(self._schedule(env)[0])

    def _prepared(self, env: dict, counters: list, runs, sels, initial: bool, rows: int):
        """What one launch over ``counters`` needs (in a program of ``rows`` iterations: a loop with
        nested loops runs fewer in it), with the seconds that took; None where it cannot run."""
        started = time.perf_counter()
        envs = [dict(env, **{self.var: c}) for c in counters]
        prepared = self._prepare(env, envs, runs, sels, initial=initial)
        if prepared is None:
            return None
        (_, keys), closed, xs, ring0 = prepared
        key = (rows, keys)
        return None if key in self.failed else (key, envs, runs, closed, xs, ring0, time.perf_counter() - started)

    def _launch(self, prepared, ring, ending: bool = False):
        """One prepared launch, from ``ring`` (None: its own initial carry): the final carry, or None
        (nothing changed) where it cannot run. ``ending``: the loop holds its dim's end check; the
        answer is then the final carry, how many of the launch's steps ran (up to and including
        the first whose flag holds), the only ones written back, and whether a flag held."""
        key, envs, runs, closed, xs, ring0, seconds = prepared
        started, compiled = time.perf_counter(), self.compile_seconds()
        if ending:
            xs = dict(xs, end=runs[self.plan.end])
        nested = [closed[f"n{k}"] for k in range(len(self.plan.nested))]
        holding = [self._hold("carry", (ring0 if ring is None else ring, [n["r"] for n in nested])),
                   self._hold("inputs", (xs, [n["g"] for n in nested]))]
        try:
            ring, ys = self.compiled(key, len(envs), closed, xs, ring0 if ring is None else ring)
        except Exception:  # noqa: BLE001  the loop statement by statement says what failed, at its user's line
            self._release(holding)
            self.failed.add(key)
            return None
        holding.append(self._hold("rows", ys))
        if ending:  # the chunk's flags, read on the host at once
            held = np.flatnonzero(self.backend.to_numpy(ys[-1]))
            kept, ended = (int(held[0]) + 1, True) if held.size else (len(envs), False)
            envs, runs = envs[:kept], [r[:kept] for r in runs]
            ys = [_first_rows(y, kept) for y in ys[:-1]]
        written = len(self.plan.written_back)
        self._write_back(ys[:written], envs, runs)
        self._release(holding)
        self._call_deferred(ys[written:], envs, runs)
        self._free(envs)
        for nested, guards in zip(self.nested, self.nested_guards):
            for e in envs:
                if all(g(e) for g in guards):
                    inner, _, _ = nested._schedule(e)
                    nested._free([dict(e, **{nested.var: c}) for c in inner])
        self.ledger.launches += 1
        self.launched.append((len(envs), seconds + time.perf_counter() - started - self.compile_seconds() + compiled))
        return (ring, len(envs), ended) if ending else ring

    def _hold(self, what: str, values) -> tuple[str, int]:
        """Account the device bytes of ``values`` (a launch's carry, inputs or returned rows) in the
        ledger as ``device loop <name> <what>``, until :meth:`_release`."""
        held = (f"device loop {self.name} {what}", _nbytes(values))
        self.ledger.add(*held)
        return held

    def _release(self, holding: list[tuple[str, int]]) -> None:
        for name, nbytes in holding:
            self.ledger.add(name, -nbytes)

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

    def _prepare(self, env: dict, envs: list[dict], runs, sels, provided=frozenset(), initial: bool = True):
        """The compiled loop's static key, its inputs, per-iteration values and initial carry
        (``provided``: the names of closed inputs the enclosing loop's program computes; ``initial``:
        False where the carry comes from the previous launch)."""
        closed, gathered, sel_xs, arg_xs, keys = {}, {}, {}, {}, []
        for s, step in enumerate(self.plan.steps):
            ran = runs[s]
            for k, src in enumerate(step.inputs):
                wanted = _wanted(runs, sels, f"{s}.{k}")
                if src.kind in (CLOSED, GATHERED) and f"{s}.{k}" in provided:
                    continue
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
                if not ran.any() and not self.plan.nested and self.plan.end is None:
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
                 for (n, j), depth in self.plan.carried.items()} if initial else None
        xs = {"sel": sel_xs, "g": gathered, "a": arg_xs}
        if self.row_reads:
            rows = self._row_positions(envs, runs)
            if rows is None:
                return None
            xs["row"] = rows
        for k, nested in enumerate(self.plan.nested):
            inner = self._prepare_nested(k, nested, envs)
            if inner is None:
                return None
            keys.append(inner[0])
            closed[f"n{k}"], xs[f"n{k}"] = inner[1], inner[2]
        return (len(envs), tuple(keys)), closed, xs, ring0

    def _prepare_nested(self, k: int, nested, envs: list[dict]):
        """A nested loop's static key, the inputs it reads once (its closed inputs read once by the
        enclosing loop too, its initial carry) and its per-iteration values of every enclosing iteration
        (stacked); None where the iterations differ in what compiles."""
        loop = self.nested[k]
        provided = {name for name, src in nested.inputs if src.kind in (LOCAL, CARRIED, STACKED)}
        per_iteration = {name for name, src in nested.inputs if src.kind == GATHERED}
        writers = {self.nested[w] for w in self.stacked_from[k]}
        keys, once, stacked, first = set(), None, [], None
        for e in envs:
            counters, runs, sels = loop._schedule(e)
            if not counters or any(w._schedule(e)[0] != counters for w in writers):
                return None
            wanted = {name: _wanted(runs, sels, name) for name in self.invariant[k]}
            first = first or wanted
            if any((wanted[n] & ~first[n]).any() for n in wanted):
                return None  # read where the first iteration, whose values serve every one, does not
            read = provided if once is None else provided | once["c"].keys() | self.invariant[k]  # read once
            prepared = loop._prepare(e, [dict(e, **{loop.var: c}) for c in counters], runs, sels, read,
                                     initial=once is None)
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
        """Dicts of the same keys, their leaves stacked along a new leading axis (on the host: one
        transfer to the device at the launch)."""
        first = trees[0]
        if isinstance(first, dict):
            return {name: self._stack([t[name] for t in trees]) for name in first}
        return np.stack([t if isinstance(t, np.ndarray) else self.backend.to_numpy(t) for t in trees])

    def _dim_env(self, s: int, env: dict, at: dict) -> dict:
        """What a kernel of step ``s`` sees: the bounds and its point's dims."""
        point = self.points[s](at)
        return dict(env, **{d.name: p for d, p in zip(self.plan.steps[s].node.domain, point)})

    def _read(self, src: Source, index):
        return self.stores[src.key].read(index)

    def _zeros(self, edge: Edge, env: dict):
        shape = shape_at(self.sdg.read_shape(edge), env)
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
        values = [filler if v is None else v for v in values]
        if self.plan.nested:  # on the host: a launch's iterations vary in number, the device stack's compile with it
            return self._stack(values)
        dtype = self.sdg.nodes[src.key[0]].dtypes[src.key[1]]
        return self.backend.stack(values, (len(values),), dtype)

    def _initial(self, n: int, j: int, env: dict, first: dict, back: int):
        """The carried value of ``back`` iterations before the first: from the store where a
        previous launch wrote it back, else zeros (no run reads it)."""
        node = self.sdg.nodes[n]
        if (n, j) in self.nested_rows:  # a nested loop's rows, one per iteration of it
            rows = len(self.nested[self.nested_rows[(n, j)]]._schedule(first)[0])
            shape = (rows, *shape_at(node.shapes[j], env))
            return self.backend.cast(np.zeros(shape, node.dtypes[j]), node.dtypes[j])
        if (n, j) in self.plan.written_back:
            at = dict(first, **{self.var: first[self.var] - back})
            try:
                return self.backend.cast(self.stores[(n, j)].read(self.points[self.writer[(n, j)]](at)),
                                         node.dtypes[j])
            except TempoError:
                pass
        shape = shape_at(node.shapes[j], env)
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

    def _free(self, envs: list[dict]) -> None:
        for (free, _), (point, guards) in zip(self.plan.frees, self.free_points):
            outs = [j for j in free.freed(len(self.sdg.nodes[free.node_id].shapes))
                    if self.stores[(free.node_id, j)].kind == "point"]
            for e in envs:
                if all(g(e) for g in guards):
                    at = point(e)
                    for j in outs:
                        self.stores[(free.node_id, j)].free_point(at)


def _nbytes(values) -> int:
    """The bytes of the arrays in ``values`` (dicts, tuples and lists of them)."""
    if isinstance(values, dict):
        return sum(_nbytes(v) for v in values.values())
    if isinstance(values, (tuple, list)):
        return sum(_nbytes(v) for v in values)
    return int(getattr(values, "nbytes", 0))


def _first_rows(values, count: int):
    """The first ``count`` rows of ``values`` (an array, or a tuple of them: a sink's kept inputs)."""
    if isinstance(values, tuple):
        return tuple(_first_rows(v, count) for v in values)
    return values if values.shape[0] == count else values[:count]


def _wanted(runs: list, sels: list, name: str) -> np.ndarray:
    """At which iterations the input ``"s.k"`` (step ``s``'s input ``k``) is read: where the step runs
    and, for a merge, takes that branch."""
    s, k = map(int, name.split("."))
    return runs[s] if sels[s] is None else runs[s] & (sels[s] == k)


def _row_major(point: tuple, var: str) -> bool:
    """Whether a writer at ``point`` writes consecutive rows of its innermost dim as the counter grows."""
    *outer, last = point
    if any(uses(p, var) for p in outer) or not uses(last, var):
        return False
    v = counter(last, var)
    slope = simplify(last.substitute({v: v + 1}) - last)
    return slope.is_const and slope.value == 1
