"""A planned loop (:mod:`tempo.plan.device_loops`) as one ``lax.scan`` inside ``jax.jit``.

The scan's body traces every step of the loop in order: a fused island or
device op through its :class:`~tempo.runtime.backends.jax.Island`'s traced
function, a merge as a select among its branches by the branch index the
host computed for the iteration. The carry holds the values later
iterations read (``x[t - 1]``); the per-iteration inputs (``xs``) are the
merges' branch indices, the values gathered from stores, and the islands'
host values (normal random numbers), with the scan's index, from which, with the
launch's first counter and the bounds (``closed["at"]``), the body computes
each island step's symbol values, spatial index starts and uniform random
numbers (:mod:`tempo.runtime.backends.jax_step_values`); the stacked outputs (``ys``) are what
is written back. Every step runs at every iteration, also where an ``if``
of the schedule skips it: what it computes there is neither read nor
written back (XLA raises no floating-point errors). A loop is traced once
per static key (its trip count, the static sizes of its islands, their
spatial index forms) and input shapes.

A loop over iterations with nested loops (:class:`~tempo.plan.loop_plan.Nested`)
traces each nested loop's scan inside its own body, its per-iteration
values sliced from the enclosing loop's (those the same at every
iteration passed once), and keeps the inputs of its sinks and checkpoints
as outputs for the host. The rows a nested loop's scan stacks are values
of the enclosing body: another nested loop scans over them (``stacked``,
in the same iteration or, carried, in a later one) and a step reads them
whole (``rows``) or one of them (``row``, at an index the host computes per
iteration), or a tile of them at a time (``sliced``: the rows reshaped into
one row of ``Z`` rows per tile, where the host checked that the tiles cover
them in order), or a window of ``n`` rows from each row on (``window``: the
rows padded with ``n - 1`` rows of zeros and gathered into one row of ``n``
rows per row, where the host checked that the windows start at the rows in
order). Its scan runs over a fixed number
of rows (the key's trip count: the longest launch) and skips the rows past
the launch's trip count under ``lax.cond``, so that launches of fewer
iterations share its one compile; the carry (parameters, optimizer state)
is donated to the program, as the previous launch returned it (a first
launch's is copied: its arrays are the stores' and the cached zeros). A
nested scan writes its rows in place into buffers carried from iteration to
iteration of the enclosing loop (:data:`BUFFERS`: the rows it wrote in the
previous one, every row overwritten), made once per launch, where a scan's
stacked outputs are zeros filled at every iteration. A nested loop of at most :data:`UNROLLED` rows
that reads rows of a value the same at every iteration of the enclosing loop,
one row at a time (the layers' weights, ``w[l]``; not a tile of rows, which a
learner's loop over tiles reads of a constant), is unrolled instead, each row passed to the
program as an array of its own: a row a scan reads of a stacked value is a
dynamic slice, which XLA on a CPU copies before a product reads it. The rows
an unrolled loop writes stay separate arrays (:class:`Rows`), in the values
of the enclosing body and in its carry from one iteration to the next, so a
loop that reads them (the K/V buffers' merges of the next step, the layers)
is unrolled too and a buffer a step updates row by row (``where(rows == t,
...)``: a ``dynamic_update_slice``) is updated in place, never stacked,
sliced or copied, within a launch or between launches: a launch returns
such rows apart, and the next launch's program (compiled for the carry's
form) takes them as they are, donated. A nested loop's merge that takes the same branch at every
iteration of a launch (the buffers' ``t = 0`` branch in the first launch
only) is traced as that branch, so the carried buffer passes through it as
it is; the launched loop's own merges are selects, so that its first launch
and the later ones share one program (a whole run compiles once).

A loop that holds the end check of its dim (``tpo.end_when``;
:attr:`~tempo.plan.loop_plan.LoopPlan.end`) runs the same way, a launch
per chunk of steps: the check's step reduces its flag (every element holds,
where the check runs at that step), the flags of the chunk's steps are an
output for the host, and the loop is a ``lax.while_loop`` that stops after
the first step where the flag holds, each step's outputs written into its
row of buffers of the chunk's rows, so that no step past the dim's end
computes anything and its rows are zeros (a loop whose per-step inputs are
rows kept apart, :class:`Rows`, is a ``lax.scan`` that skips those steps
under ``lax.cond``).

A loop over iterations that holds such a loop (:attr:`LoopPlan.ending`) runs
it to the cap the run gives its dim, within one launch of the enclosing
loop: its length at each iteration, ``T[i]``, is a value of the traced body
(the step after the first whose flag holds) and an output for the host. The
steps after it that read rows padded past ``T[i]`` (:attr:`LoopPlan.padded`,
with the padded axes :func:`tempo.plan.ended_rows.island_axes` finds) are
traced with ``T`` at the cap, their inputs and the outputs of their ops that
a sum, scan or product reads (:func:`tempo.plan.ended_rows.masked_steps`)
set to zero past ``T[i]`` by a compare; a nested loop after it that runs to
``T`` is given ``T[i]`` and masks its steps the same way. Those steps see
``T`` at ``T[i]``: a mean over padded rows divides their sum by the count
before the end, a value of ``T`` is ``T[i]``'s, and a read of the ended
loop's row at ``T - 1`` picks row ``T[i] - 1``. The ``while_loop`` and the masks are
:mod:`tempo.runtime.backends.jax_ended`'s.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from tempo.errors import TempoError
from tempo.ir import ops
import numpy as np

from tempo.plan.loop_plan import CARRIED, CLOSED, GATHERED, LOCAL, ROW, ROWS, SLICED, STACKED, WINDOW, LoopPlan
from tempo.runtime.backends import jax_ended
from tempo.runtime.backends.jax import Island, _row, host_rows
from tempo.runtime.backends.jax_step_values import DeviceValues, device_expr, drawn_on_device
from tempo.runtime.step_values import StepValues
from tempo.symbolic.affine import uses
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import bound_of

UNROLLED = 32  # a nested loop of at most this many rows that reads rows of a value given once is unrolled
BUFFERS = "buffers"  # the key, in a loop's carry, of the buffers its nested scans write their rows into


class LoopProgram:
    """The compiled form of one planned loop; the host side is :class:`~tempo.runtime.device_loops.DeviceLoop`."""

    def __init__(self, plan: LoopPlan, islands: list[Island | None], nested: list["LoopProgram"] = (),
                 padded: dict | None = None):
        self.plan, self.islands, self.nested = plan, islands, list(nested)
        self.padded = padded or {}  # step -> padded axes of its inputs and of its ops' outputs (ended_rows)
        self.fns: dict[tuple, Callable] = {}
        self.compile_seconds = (0.0, 0.0)  # XLA's compiles of a loop with nested loops: wall and CPU seconds
        self.rows_held: dict[int, tuple] = {}  # id(value) -> (value, its rows): :meth:`split`
        self.device_values = {s: DeviceValues(island, plan.steps[s]) for s, island in enumerate(islands)
                              if island is not None and (island.indexes or island.host)}
        self.start = device_expr(plan.loop.start)  # a nested loop's first counter, of the enclosing loop's
        self.end_bound = None if plan.padded_dim is None else bound_of(plan.padded_dim).name  # T: T[i] in padded steps
        names = {n for values in self.device_values.values() for n in values.names}
        names |= {n for inner in self.nested
                  for n in (*inner.names, *(x.name for x in inner.plan.loop.start.free_symbols()))}
        self.names = sorted(names - {plan.loop.var} - {inner.plan.loop.var for inner in self.nested})
        self.merge_shapes = {s: tuple(d if isinstance(d, int) else compile_expr(d) for d in step.node.shapes[0])
                             for s, (step, island) in enumerate(zip(plan.steps, islands)) if island is None and
                             not isinstance(step.node.op, ops.UDFOp) and step.node.op.broadcast}  # broadcasting merges

    @staticmethod
    def unstack(values) -> list:
        """The rows of ``values``: on a CPU, copies of its rows on the host, put back (no compile for a
        launch of a new length); elsewhere one jitted dynamic index each."""
        if all(d.platform == "cpu" for d in values.devices()):
            return [jax.device_put(row, may_alias=False) for row in np.asarray(values)]
        return [_row(values, k) for k in range(values.shape[0])]

    def static_key(self, s: int, env: dict) -> tuple:
        """What step ``s``'s traced code depends on besides its inputs' shapes: an island's static
        sizes, a broadcasting merge's output shape."""
        island = self.islands[s]
        if island is None:
            shape = self.merge_shapes.get(s, ())
            return tuple(d if isinstance(d, int) else int(d(env)) for d in shape)
        return tuple(env[n] for n in island.names)

    def static_sizes(self, s: int, env: dict) -> tuple:
        """The sizes step ``s``'s traced code uses (an island's, evaluated: a tile's rows, the same at
        every tile where the tile divides the dim, whatever the tile's counter), or its static key."""
        island = self.islands[s]
        return self.static_key(s, env) if island is None else tuple(size(env) for size in island.sizes)

    def sized_by(self, s: int) -> tuple[str, ...]:
        """The names :meth:`static_sizes` of step ``s`` reads."""
        island = self.islands[s]
        if island is not None:
            return island.names
        return tuple(sorted({x.name for d in self.plan.steps[s].node.shapes[0] if not isinstance(d, int)
                             for x in d.free_symbols()}))

    def needs_args(self, s: int) -> bool:
        island = self.islands[s]
        return island is not None and bool(island.host or island.indexes)

    def step_values(self, s: int) -> StepValues:
        """Step ``s``'s host values over a launch's steps and its static forms (index forms, the shapes
        of the random numbers the body draws)."""
        island = self.islands[s]
        return StepValues(island, self.plan.steps[s], frozenset(j for j, _ in drawn_on_device(island)))

    def __call__(self, key: tuple, trips: int, closed: dict, xs: dict, ring0: dict, owned: bool = False):
        """Launch the loop over ``trips`` iterations from the carry ``ring0``: the carry and the stacked
        outputs. A loop with nested loops or an end check donates its carry: ``owned`` where it is the
        previous launch's returned carry, which nothing else holds (donated as it is), else it is
        copied first (the cached zeros and the stores' arrays of a first launch stay intact)."""
        if not self.nested and self.plan.end is None:
            fn = self.fns.get(key)
            if fn is None:
                fn = self.fns[key] = jax.jit(self._traced(key))
            return fn(closed, self.consts(), xs, ring0)
        rows = key[0]  # the scan's rows: a launch of fewer iterations pads its per-iteration values
        closed = self.split(closed)
        args = (closed, self.consts(), jax.tree_util.tree_map(lambda a: _padded(a, rows), xs),
                ring0 if owned else jax.tree_util.tree_map(jnp.array, ring0), np.int32(trips))
        form = (key, jax.tree_util.tree_structure(ring0))  # a carry of one array per value, or of rows apart
        fn = self.fns.get(form)
        if fn is None and not self.nested:  # compiled at its first launch, called through jit's dispatch
            fn = self.fns[form] = jax.jit(self._traced(key), donate_argnums=(3,))
        if fn is None:
            started = (time.perf_counter(), time.process_time())
            with warnings.catch_warnings():  # a first launch's stacked carry: its buffers not the rows returned
                warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
                fn = self.fns[form] = jax.jit(self._traced(key), donate_argnums=(3,)).lower(*args).compile()
            wall, cpu = self.compile_seconds
            self.compile_seconds = (wall + time.perf_counter() - started[0], cpu + time.process_time() - started[1])
        ring, ys = fn(*args)
        return ring, ys if trips == rows else jax.tree_util.tree_map(lambda y: _first_rows(y, trips), ys)

    def split(self, closed: dict) -> dict:
        """``closed`` with the rows a nested loop of at most :data:`UNROLLED` rows reads, one at a time,
        of a value the same at every iteration (the layers' weights) as separate arrays, kept from launch
        to launch while the value is the same array."""
        held, self.rows_held = self.rows_held, {}
        out = dict(closed)
        for k in range(len(self.nested)):
            once = closed[f"n{k}"]
            values = {}
            for name, value in once["g"].items():
                if not 0 < value.shape[0] <= UNROLLED or _in_tiles(self.nested[k].plan, name):
                    values[name] = value
                    continue
                kept = held.get(id(value))
                if kept is None or kept[0] is not value:
                    rows = host_rows(value)
                    kept = (value, Rows(self.unstack(value) if rows is None else rows))
                self.rows_held[id(value)] = kept
                values[name] = kept[1]
            out[f"n{k}"] = dict(once, g=values)
        return out

    def consts(self) -> dict:
        """The islands' constants (device arrays passed in), and those of the nested loops."""
        out = {str(s): island.consts for s, island in enumerate(self.islands) if island is not None}
        out.update({f"n{k}": inner.consts() for k, inner in enumerate(self.nested)})
        return out

    def _traced(self, key: tuple) -> Callable:
        trips, keys = key
        keys, tracers, shapes, branches, forms = list(keys), [], [], {}, {}
        device = self.device_values
        for s, island in enumerate(self.islands):
            static = keys.pop(0)
            if self.needs_args(s):
                forms[s] = dict(zip(device[s].keyed, keys.pop(0)))
            step = self.plan.steps[s]
            if isinstance(step.node.op, ops.MergeOp) and len(step.inputs) > 1:
                branches[s] = keys.pop(0)  # the branch taken at every iteration, None: a select
            if island is None:
                tracers.append(None)
                shapes.append(static)
            elif s in self.padded:  # traced in the body, masked by the iteration's length of the ended dim
                tracers.append((dict(zip(island.names, static)), forms.get(s, {})))
                shapes.append(None)
            else:
                tracers.append(island._traced(dict(zip(island.names, static)), forms.get(s, {})))
                shapes.append(None)
        nested = []
        for n, inner in zip(self.plan.nested, self.nested):
            inner_key = keys.pop(0)
            nested.append((n, inner._traced(inner_key), inner_key[0]))
        firsts = [inner.start for inner in self.nested]  # each nested loop's first counter
        plan, padded, islands, end_bound = self.plan, self.padded, self.islands, self.end_bound
        deferred = [s for s, step in enumerate(plan.steps) if isinstance(step.node.op, ops.UDFOp) and s != plan.end]

        def body_of(closed, consts):
            def body(ring, x):
                values, kept, made = {}, {}, {}
                buffers = ring.get(BUFFERS)  # None: the nested scans' rows are stacked afresh (their shapes found)
                length = closed.get("length")  # of the dim that ended in this iteration, in a loop nested after it
                env = dict(closed["at"], **{plan.loop.var: closed["at"][plan.loop.var] + x["k"]})
                for s, step in enumerate(plan.steps):
                    for k, (n, inner, rows) in enumerate(nested):
                        if n.at == s:
                            ended = _run_nested(k, n, inner, rows, closed, consts, x, values, ring, firsts[k], env,
                                                length, buffers, made)
                            length = length if ended is None else ended
                    ins = [_input(src, f"{s}.{k}", closed, x, values, ring) for k, src in enumerate(step.inputs)]
                    if s == plan.end:
                        kept[s] = (jnp.all(ins[0]) & x["end"],)
                        continue
                    if s in deferred:
                        kept[s] = tuple(ins)
                        continue
                    masks = padded.get(s)
                    if masks is not None:
                        ins = [jax_ended.masked(v, axes, length) for v, axes in zip(ins, masks[0])]
                        for k in masks[3]:  # the row at T - 1: the host's position is the cap's last row
                            rows = _stacked(values[step.inputs[k].key])
                            ins[k] = rows[x["row"][f"{s}.{k}"] + length - rows.shape[0]]
                    if tracers[s] is None:
                        outs = (_merge(step, ins, x["sel"].get(str(s)), shapes[s], branches.get(s)),)
                        if masks is not None:
                            outs = [jax_ended.masked(v, axes, length) for v, axes in zip(outs, masks[1][0])]
                    else:
                        given = dict(consts[str(s)])
                        given.update({int(name[1:]): value for name, value in x["a"].get(str(s), {}).items()})
                        starts = {}
                        at = env if masks is None else dict(env, **{end_bound: length})  # T: T[i]
                        if s in device:  # the step's symbol values and index starts, of its counters
                            symbols, starts = device[s](at, forms[s])
                            given.update(symbols)
                        traced = tracers[s] if masks is None else islands[s]._traced(
                            *tracers[s], lambda j, results, outs=masks[1], counts=masks[2], at=at: [
                                jax_ended.masked(jax_ended.mean(v, counts[j], at) if j in counts else v, axes, length)
                                for v, axes in zip(results, outs[j])])
                        outs = traced(ins, given, starts)
                    for j, (value, dtype) in enumerate(zip(outs, step.node.dtypes)):
                        values[(step.node.id, j)] = value if value.dtype == dtype else value.astype(dtype)
                for k, (n, inner, rows) in enumerate(nested):  # nested loops after the last statement
                    if n.at == len(plan.steps):
                        _run_nested(k, n, inner, rows, closed, consts, x, values, ring, firsts[k], env, length,
                                    buffers, made)
                new = {f"{n}_{j}": (values[(n, j)],) + ring[f"{n}_{j}"][:-1] for n, j in plan.carried}
                if BUFFERS in ring:  # the rows this iteration wrote: the buffers of the next one
                    new[BUFFERS] = made
                flag = () if plan.end is None else kept[plan.end]
                lengths = () if plan.ending is None else (length,)
                return new, tuple(values[key] for key in plan.written_back) + tuple(kept[s] for s in deferred) + \
                    lengths + flag

            return body

        def device_loop(closed, consts, xs, ring0, buffers=None):
            body, xs = body_of(closed, consts), dict(xs, k=jnp.arange(trips))
            if buffers is None or any(_is_rows(v) for v in jax.tree_util.tree_leaves(xs, is_leaf=_is_rows)):
                return _scan(body, ring0, xs, trips)
            return _written(body, ring0, xs, buffers, trips)

        def whole_run(closed, consts, xs, ring0, ran):
            body = body_of(closed, consts)
            xs = dict(xs, k=jnp.arange(trips))  # the scan's index: a step's counter is the launch's first plus it
            first = jax.tree_util.tree_map(lambda a: a[0], xs, is_leaf=_is_rows)
            ring0, shaped = _carry_form(body, ring0, first)  # a nested loop unrolled over it writes no buffers
            if self.nested:  # the buffers of the nested scans' rows (none in a loop without nested loops)
                ring0, shaped = _carry_form(body, _with_buffers(body, ring0, first), first)
            if plan.end is not None and not any(_is_rows(v) for v in jax.tree_util.tree_leaves(xs, is_leaf=_is_rows)):
                ring, ys = jax_ended.until(body, ring0, xs, shaped, ran, trips)
                return _launch_carry(ring), ys

            def skipped(ring, _x):
                return ring, jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shaped)

            def row(carry, x):
                ring, ended = carry
                ring, ys = lax.cond((x["k"] < ran) & ~ended, body, skipped, ring, x)
                return (ring, ended | ys[-1] if plan.end is not None else ended), ys

            (ring, _), ys = _scan(row, (ring0, jnp.bool_(False)), xs, trips)
            return _launch_carry(ring), ys

        return whole_run if self.nested or plan.end is not None else device_loop


def _written(body: Callable, ring0, xs, buffers, trips: int):
    """``lax.scan(body, ring0, xs)`` whose stacked outputs are written, row by row in place, into
    ``buffers`` (arrays of their shapes, every row overwritten): the rows a nested loop wrote in the
    enclosing loop's previous iteration, where a scan fills fresh buffers with zeros at every one."""

    def step(k, state):
        ring, ys = state
        ring, y = body(ring, jax.tree_util.tree_map(lambda a: lax.dynamic_index_in_dim(a, k, keepdims=False), xs))
        return ring, jax.tree_util.tree_map(lambda rows, row: lax.dynamic_update_index_in_dim(rows, row, k, 0), ys, y)

    return lax.fori_loop(0, trips, step, (ring0, buffers))


def _with_buffers(body: Callable, ring0: dict, x: dict) -> dict:
    """``ring0`` with zeros, made once per launch, for the rows each nested scan of ``body`` writes (a
    buffer per output, carried from iteration to iteration: :data:`BUFFERS`)."""
    ring, _ = jax.eval_shape(body, dict(ring0, **{BUFFERS: None}), x)
    if not ring[BUFFERS]:
        return ring0
    return dict(ring0, **{BUFFERS: jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), ring[BUFFERS])})


def _launch_carry(ring: dict) -> dict:
    """A launch's returned carry, the nested scans' buffers left out: a nested loop's rows stay
    separate arrays (:class:`Rows`), which the next launch's program takes as they are."""
    return {name: value for name, value in ring.items() if name != BUFFERS}


def _in_tiles(plan: LoopPlan, name: str) -> bool:
    """Whether the input ``"s.k"`` of ``plan``'s steps is read a tile of rows at a time (a slice that moves
    with the loop's counter)."""
    s, k = map(int, name.split("."))
    index = plan.steps[s].inputs[k].index
    return any(a.op == "slice" and uses(a, plan.loop.var) for a in index.args)


@jax.tree_util.register_pytree_node_class
class Rows:
    """The rows of a value as separate arrays (:meth:`LoopProgram.split`); ``rows[k]`` is row ``k``."""

    def __init__(self, rows: tuple):
        self.rows = tuple(rows)

    def __getitem__(self, k: int):
        return self.rows[k]

    @property
    def nbytes(self) -> int:
        return sum(int(row.nbytes) for row in self.rows)

    def tree_flatten(self):
        return self.rows, None

    @classmethod
    def tree_unflatten(cls, _aux, rows):
        return cls(rows)


def _is_rows(value) -> bool:
    return isinstance(value, Rows)


def _scan(body: Callable, carry, xs, trips: int):
    """``lax.scan(body, carry, xs)``, or, where ``xs`` holds rows as separate arrays, the same loop
    unrolled, each iteration reading its own arrays (a row a scan reads of a stacked value is a
    dynamic slice, which XLA copies before a product reads it) and each output's rows kept as
    separate arrays (:class:`Rows`: no stack copies them into one)."""
    if not any(_is_rows(v) for v in jax.tree_util.tree_leaves(xs, is_leaf=_is_rows)):
        return lax.scan(body, carry, xs, length=trips)
    outputs = []
    for k in range(trips):
        carry, ys = body(carry, jax.tree_util.tree_map(lambda a: a[k], xs, is_leaf=_is_rows))
        outputs.append(ys)
    return carry, jax.tree_util.tree_map(lambda *rows: Rows(rows), *outputs)


def _carry_form(body: Callable, ring0: dict, x: dict) -> tuple[dict, object]:
    """``ring0`` (the carry as the launch is given it: one array per value) in the form ``body``
    returns it, where a nested loop's rows stay separate arrays from step to step (so that a step
    updates its row of each in place), and the shapes of ``body``'s other outputs."""
    for _ in range(3):  # a loop unrolled because it reads rows as separate arrays yields them so
        ring, shaped = jax.eval_shape(body, ring0, x)
        formed = jax.tree_util.tree_map(_like, ring0, ring, is_leaf=_is_rows)
        if jax.tree_util.tree_structure(formed) == jax.tree_util.tree_structure(ring0):
            return formed, shaped
        ring0 = formed
    raise TempoError("a device loop's carry changes form from step to step")


def _stacked(value):
    """``value`` as one array: the rows of a :class:`Rows` stacked."""
    return jnp.stack(value.rows) if _is_rows(value) else value


def _like(value, shaped):
    """``value`` (one array or :class:`Rows`) in the form of ``shaped`` (an abstract value of either)."""
    if not _is_rows(shaped):
        return _stacked(value)
    return value if _is_rows(value) else Rows(value[k] for k in range(len(shaped.rows)))


def _run_nested(k: int, nested, inner, steps: int, closed: dict, consts: dict, x: dict, values: dict, ring: dict,
                start: Callable, env: dict, length=None, buffers: dict | None = None, made: dict | None = None):
    """Trace nested loop ``k`` at one iteration of the enclosing loop (its counters and the bounds:
    ``env``; ``start``: the nested loop's first counter, of them); its written-back rows become values.
    A loop over a dim that ends at run time runs its ``steps`` steps (the cap), those after the first where
    its flag holds skipped; its length there (the steps it ran, an int32 on the device) is returned, else
    None. A loop after it that runs to the dim's bound is given that ``length``, and its rows past it are
    set to zero. A nested scan writes its rows into ``buffers[k]`` where it is given them, and puts the
    rows it wrote in ``made`` (none of a loop unrolled or over a dim that ends at run time)."""
    prepared, per_iteration = closed[f"n{k}"], x[f"n{k}"]
    given = dict(prepared["c"], **per_iteration["g"])
    given["at"] = dict(env, **{nested.plan.loop.var: start(env)})
    rows = dict(prepared["g"], **per_iteration["x"]["g"])  # the values it reads row by row
    for name, src in nested.inputs:
        if src.kind in (LOCAL, CARRIED):
            given[name] = _input(src, name, closed, x, values, ring)
        elif src.kind == STACKED:
            rows[name] = values[src.key] if src.shift == 0 else ring[f"{src.key[0]}_{src.key[1]}"][src.shift - 1]
        elif src.kind == SLICED:  # a tile of `shift` rows per iteration (rows kept apart stacked first)
            value = _stacked(values[src.key])
            rows[name] = value.reshape((value.shape[0] // src.shift, src.shift) + value.shape[1:])
        elif src.kind == WINDOW:  # per row, the `shift` rows from it on, zeros past the last
            rows[name] = _windows(_stacked(values[src.key]), src.shift)
    ending = nested.plan.end is not None
    if nested.plan.padded:
        given["length"] = length
    args = (given, consts[f"n{k}"], dict(per_iteration["x"], g=rows), prepared["r"])
    if ending or nested.plan.nested:
        _, ys = inner(*args, np.int32(steps)) if ending else inner(*args)
    else:
        _, ys = inner(*args, None if buffers is None else buffers.get(str(k)))
        if made is not None and not any(_is_rows(y) for y in ys):
            made[str(k)] = ys
    to_cap = nested.plan.padded_dim is not None  # a loop run to T: its rows past T[i] set to zero
    for key, rows in zip(nested.plan.written_back, ys):
        values[key] = jax_ended.masked(_stacked(rows), ((0, 0),), length) if to_cap else rows
    if not ending:
        return None
    flags = _stacked(ys[-1])
    return jnp.where(jnp.any(flags), jnp.argmax(flags).astype(jnp.int32) + 1, jnp.int32(steps))


def _windows(value, n: int):
    """``(rows, n, ...)``: at row ``k``, rows ``k`` to ``k + n - 1`` of ``value``, zeros past its last row."""
    padded = jnp.concatenate([value, jnp.zeros((n - 1,) + value.shape[1:], value.dtype)])
    return padded[jnp.arange(value.shape[0])[:, None] + jnp.arange(n)[None, :]]


def _first_rows(y, count: int):
    """Rows ``:count`` of a launch's output ``y``: on a CPU, sliced on the host and put back (a slice on
    the device compiles a program for every count: a run's last, shorter launch would compile one per
    output)."""
    if all(d.platform == "cpu" for d in y.devices()):
        return jax.device_put(np.asarray(y)[:count], may_alias=False)
    return y[:count]


def _padded(a, rows: int):
    """``a`` with its leading axis padded to ``rows`` by repeating its last row."""
    short = rows - a.shape[0]
    if short <= 0:
        return a
    pad = a[-1:].repeat(short, 0) if isinstance(a, np.ndarray) else jnp.repeat(a[-1:], short, 0)
    return np.concatenate([a, pad]) if isinstance(a, np.ndarray) else jnp.concatenate([a, pad])


def _input(src, name: str, closed: dict, x: dict, values: dict, ring: dict):
    if src.kind == CLOSED:
        return closed[name]
    if src.kind in (GATHERED, WINDOW):
        return x["g"][name]
    if src.kind == LOCAL:
        return values[src.key]
    if src.kind == ROWS:
        return _stacked(values[src.key])
    if src.kind == ROW:
        return _stacked(values[src.key])[x["row"][name]]
    assert src.kind == CARRIED
    return ring[f"{src.key[0]}_{src.key[1]}"][src.shift - 1]


def _merge(step, ins: list, sel, shape, branch: int | None = None):
    """A merge step: its branch ``branch`` where it takes the same at every iteration, else a select
    by the branch index ``sel`` of the iteration."""
    node = step.node
    dtype = node.dtypes[0]
    ins = [v if v.dtype == dtype else v.astype(dtype) for v in ins]
    ins = [jnp.broadcast_to(v, shape) if k in node.op.broadcast else v for k, v in enumerate(ins)]
    if branch is not None:
        return ins[branch]
    if sel is None or len(ins) == 1:
        return ins[0]
    value = ins[-1]
    for k in range(len(ins) - 2, -1, -1):
        value = jnp.where(sel == k, ins[k], value)
    return value


def compile_loop(plan: LoopPlan, sdg) -> LoopProgram | None:
    """The loop of ``plan`` as a :class:`LoopProgram`, or None when a step has no traced form here."""
    nested = [compile_loop(n.plan, sdg) for n in plan.nested]
    if any(inner is None for inner in nested):
        return None
    padded = jax_ended.padded_axes(plan, sdg)
    islands = []
    for s, step in enumerate(plan.steps):
        node = step.node
        if isinstance(node.op, (ops.MergeOp, ops.UDFOp)):  # a merge, or a sink the host calls after the launch
            islands.append(None)
            continue
        if isinstance(node.op, ops.ConstOp) and node.op.num_domain_axes:
            return None
        if isinstance(node.op, ops.FusedOp):
            steps, outputs = node.op.steps, node.op.outputs
        else:
            steps = (ops.FusedStep(node.op, tuple((-1, k) for k in range(len(step.inputs))), ()),)
            outputs = tuple((0, k) for k in range(len(node.shapes)))
        if s in padded:  # a mean over padded rows: their sum, divided by the count at T[i] in the body
            steps = tuple(replace(st, op=replace(st.op, fn="sum")) if j in padded[s][2] else st
                          for j, st in enumerate(steps))
        try:
            island = Island(steps, outputs, {})
        except TempoError:
            return None
        moving = {d.name for d, p in zip(node.domain, step.execute.point) if uses(p, plan.loop.var)}
        if moving & set(island.names) and s not in plan.shaped:  # a tile's sizes: one per launch, checked
            return None
        islands.append(island)
    return LoopProgram(plan, islands, nested, padded)


