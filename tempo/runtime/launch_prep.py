"""A device loop's host work before each launch: its schedule and the values the launch is handed.

:class:`LaunchPreparation` is the part of :class:`~tempo.runtime.device_loops.DeviceLoop`
that works out, for the iterations of one launch, which statements run and which
branch each merge takes (its schedule, cached per enclosing counters, its
conditions evaluated over arrays of the counters: a nested loop's over those of
every enclosing iteration at once), the compiled loop's static key, the values
it reads from stores (closed, gathered row by row or as one slice of a block
store, its initial carry), the islands' index forms and host values
(:mod:`tempo.runtime.step_values`: evaluated over the launch's counters at
once, those of the nested loops over the counters of every enclosing
iteration at once; the symbol values and index starts the compiled loop
computes from its counter), and the nested loops' per-iteration values,
stacked once read or, where a nested loop reads nothing per iteration from
stores and compiles the same at every one, the arrays of its schedule and
host values over them all (see the module docstring of
:mod:`tempo.runtime.device_loops` for when a launch can run).
"""
from __future__ import annotations

import functools

import numpy as np

from tempo.ir.ops import MergeOp
from tempo.ir.sdg import Edge
from tempo.plan.loop_plan import CARRIED, CLOSED, GATHERED, LOCAL, SLICED, STACKED, WINDOW, Source
from tempo.runtime.launches import Later, Reads, one_view
from tempo.symbolic.evaluate import shape_at


class LaunchPreparation:
    """The host's part of a :class:`~tempo.runtime.device_loops.DeviceLoop` before each launch (its
    attributes are set by the device loop's constructor)."""

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

    def _schedule(self, env: dict):
        """The loop's counter values, whether each step runs at each, and each merge's branch (cached)."""
        key = self.schedule_key(env)
        cached = self.schedules.get(key)
        if cached is not None:
            return cached
        counters = self._counters_at(env)
        cached = self.schedules[key] = (counters, *self._runs(env, counters))
        return cached

    def _schedules(self, envs: list[dict]) -> list[tuple]:
        """:meth:`_schedule` at each of ``envs`` (a nested loop's, one per iteration of the enclosing
        loop), those not cached evaluated at once: the counters once per value of the names the
        loop's start and condition read, the guards and branches over the arrays of every
        iteration's counters."""
        keys = list(map(self.schedule_key, envs))
        missing = {key: e for key, e in zip(keys, envs) if key not in self.schedules}
        if missing:
            at = list(missing.values())
            counters = [self._counters_at(e) for e in at]
            lengths = [len(c) for c in counters]
            total = sum(lengths)
            flat = {n: np.repeat(np.array([e[n] for e in at], dtype=np.int64), lengths) for n in self.schedule_names}
            flat[self.var] = np.array([c for cs in counters for c in cs], dtype=np.int64)
            runs, sels = self._runs_over(flat, total)
            ends = np.cumsum([0] + lengths)
            for key, cs, a, b in zip(missing, counters, ends[:-1], ends[1:]):
                self.schedules[key] = (cs, [r[a:b] for r in runs], [None if x is None else x[a:b] for x in sels])
        return [self.schedules[key] for key in keys]

    def _counters_at(self, env: dict) -> list:
        """The loop's counter values at ``env`` (cached by the names its start and condition read)."""
        key = self.counter_key(env)
        cached = self.counter_lists.get(key)
        if cached is None:
            cached = self.counter_lists[key] = next(self._counters(env, None))
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
        n = len(counters)
        flat = {name: np.full(n, env[name], dtype=np.int64) for name in self.schedule_names}
        flat[self.var] = np.array(counters, dtype=np.int64)
        return self._runs_over(flat, n)

    def _runs_over(self, flat: dict, n: int):
        """Whether each step runs at each of ``n`` iterations, and each merge's branch there, from
        ``flat``: the counters and the names the conditions read as arrays of ``n`` (int64)."""
        runs = [held_at(guards, flat, n) for guards in self.guards]
        sels = [None if branches is None else _branch(branches, flat, n) for branches in self.branches]
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
        for s, k, name, src in self.read_inputs:
            if name in provided:
                continue
            wanted = runs[s] if sels[s] is None else runs[s] & (sels[s] == k)
            at = self._dim_env(s, env, envs[0]) if s in self.shapes else env  # a tile's shape: at its dims
            if src.kind == CLOSED:
                closed[name] = (reads.slot(src.key, self.indexes[s][k](env)) if wanted.any()
                                else self._zeros(src.edge, at))
            else:
                gathered[name] = self._gather(src, self.indexes[s][k], envs, wanted, at, reads)
        for s, ran in enumerate(runs):
            if s in branches and branches[s] is None:
                sel_xs[str(s)] = sels[s]
            dims = env
            if self.keyed_by_dims[s]:  # its key reads its dims: those of its first iteration where it runs
                dims = self._dim_env(s, env, envs[int(np.argmax(ran)) if ran.any() else 0])
            keys.append(self.compiled.static_key(s, dims))
            if s in branches:
                keys.append(branches[s])
            if s in self.step_values:
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
        if self.plan.end is not None:
            xs["end"] = runs[self.plan.end]  # where the end check runs
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
        (stacked); None where the iterations differ in what compiles. Its schedules, reads and index
        forms are checked over every enclosing iteration at once; where the loop reads nothing per
        iteration from stores and compiles the same whatever the enclosing iteration
        (:attr:`uniform`), its first iteration is prepared and the rest are the arrays of its
        schedule and host values, else each iteration in turn."""
        loop = self.nested[k]
        provided = {name for name, src in nested.inputs if src.kind in (LOCAL, CARRIED, STACKED, SLICED, WINDOW)}
        per_iteration = {name for name, src in nested.inputs if src.kind == GATHERED}
        writers = [self.nested[w] for w in self.counted_apart[k]]
        schedules = loop._schedules(envs)
        trips = {len(counters) for counters, _, _ in schedules}
        if len(trips) != 1 or not trips.pop():
            return None
        counters = np.array([c for c, _, _ in schedules], dtype=np.int64)  # (outer, trips), as runs and sels
        runs = [np.stack([r[s] for _, r, _ in schedules]) for s in range(len(loop.plan.steps))]
        sels = [None if sel is None else np.stack([schedule[2][s] for schedule in schedules])
                for s, sel in enumerate(schedules[0][2])]
        args = self._nested_args(loop, envs, counters, runs)
        if args is None or any(not runs[s].any(axis=1).all() for s in loop.step_values):
            return None
        branches = loop._branches([(runs, sels)])
        for name in self.invariant[k]:
            wanted = _wanted(runs, sels, name)
            if (wanted & ~wanted[0]).any():
                return None  # read where the first iteration, whose values serve every one, does not
        for e, (inner, _, _) in zip(envs, schedules) if writers or self.tiles[k] or self.windows[k] else ():
            if any(w._schedule(e)[0] != inner for w in writers) or \
                    self.tiles[k] and not self._tiled(k, e, loop.var, inner) or \
                    self.windows[k] and not self._windowed(k, e, loop.var, inner):
                return None
        keys, once, stacked = set(), None, []
        for o, (e, (inner, inner_runs, inner_sels)) in enumerate(zip(envs, schedules)):
            read = provided if once is None else provided | once["c"].keys() | self.invariant[k]  # read once
            prepared = loop._prepare(e, [dict(e, **{loop.var: c}) for c in inner], inner_runs, inner_sels, reads,
                                     read, initial=once is None, branches=branches,
                                     args={s: (forms, {n: v[o] for n, v in values.items()})
                                           for s, (forms, values) in args.items()})
            if prepared is None:
                return None
            key, closed, xs, ring0 = prepared
            keys.add(key)
            if once is None:  # what is the same at every iteration of this loop, read once
                once = {"c": {n: v for n, v in closed.items() if n not in per_iteration}, "r": ring0,
                        "g": {n: v for n, v in xs["g"].items() if n in self.invariant[k]}}
                if self.uniform[k]:  # every iteration's values: the arrays over them all
                    selected = {str(s): sels[s] for s in range(len(sels)) if str(s) in xs["sel"]}
                    uniform = {"sel": selected, "g": {}, "a": {str(s): values for s, (_, values) in args.items()}}
                    if loop.plan.end is not None:
                        uniform["end"] = runs[loop.plan.end]  # where its end check runs, at every iteration
                    return key, once, {"x": uniform, "g": {}}
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

    def _nested_args(self, loop: LaunchPreparation, envs: list[dict], counters: np.ndarray,
                     runs: list) -> dict | None:
        """Nested ``loop``'s index forms and host values of each step (as :meth:`_step_args`, shaped
        ``(len(envs), trips, ...)``) over its ``counters`` at every enclosing iteration of ``envs``
        (``(len(envs), trips)``; ``runs``: each step's, of the same shape), evaluated at once; None
        where a step's index forms differ."""
        outer = np.repeat(np.array([e[self.var] for e in envs], dtype=np.int64), counters.shape[1])
        out = {}
        for s, values in loop.step_values.items():
            ran = runs[s]  # a step's first counter where it runs stands in where it does not
            inner = np.where(ran, counters, counters[np.arange(len(envs)), np.argmax(ran, axis=1)][:, None])
            formed = values.over(dict(envs[0], **{self.var: outer, loop.var: inner.reshape(-1)}), counters.size)
            if formed is None:
                return None
            out[s] = (formed[0], {name: value.reshape(counters.shape + value.shape[1:])
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
        """Zeros of the shape and dtype ``edge`` reads (:meth:`_zeros_of`)."""
        return self._zeros_of(tuple(shape_at(self.sdg.read_shape(edge), env)),
                              self.sdg.nodes[edge.src].dtypes[edge.src_out])

    def _zeros_of(self, shape: tuple, dtype: str):
        """Zeros of ``shape`` and ``dtype`` on the device, made once (a device array is never written; the
        compiled loop copies a first launch's carry before it donates it)."""
        key = (tuple(shape), dtype)
        zeros = self.zeros.get(key)
        if zeros is None:
            zeros = self.zeros[key] = self.backend.cast(np.zeros(*key), dtype)
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
            return self._zeros_of((rows, *shape_at(node.shapes[j], env)), node.dtypes[j])
        zeros = self._zeros_of(tuple(shape_at(node.shapes[j], env)), node.dtypes[j])
        if (n, j) not in self.plan.written_back:
            return zeros
        at = dict(first, **{self.var: first[self.var] - back})
        stored = reads.slot((n, j), self.points[self.writer[(n, j)]](at), optional=True)
        return Later(functools.partial(self._cast_or, zeros, node.dtypes[j]), stored)

    def _cast_or(self, zeros, dtype: str, value):
        return zeros if value is None else self.backend.cast(value, dtype)


def held_at(conditions: list, env: dict, n: int) -> np.ndarray:
    """Where every one of ``conditions`` (vector expressions) holds, over ``n`` iterations."""
    held = np.ones(n, dtype=bool)
    for condition in conditions:
        held &= np.broadcast_to(np.asarray(condition(env), dtype=bool), (n,))
    return held


def _branch(branches: list, env: dict, n: int) -> np.ndarray:
    """The first of ``branches`` (vector conditions, None: always) that holds at each of ``n``
    iterations, -1 where none does."""
    taken = np.full(n, -1, dtype=np.int32)
    for k in range(len(branches) - 1, -1, -1):
        held = True if branches[k] is None else np.broadcast_to(np.asarray(branches[k](env), dtype=bool), (n,))
        taken = np.where(held, np.int32(k), taken)
    return taken


def _standing_in(counters: np.ndarray, ran: np.ndarray) -> np.ndarray:
    """``counters`` with the first where a step runs standing in at those where it does not."""
    return np.where(ran, counters, counters[int(np.argmax(ran)) if ran.any() else 0])


def _wanted(runs: list, sels: list, name: str) -> np.ndarray:
    """At which iterations the input ``"s.k"`` (step ``s``'s input ``k``) is read: where the step runs
    and, for a merge, takes that branch."""
    s, k = map(int, name.split("."))
    return runs[s] if sels[s] is None else runs[s] & (sels[s] == k)
