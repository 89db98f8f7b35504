"""A device loop's per-step host values, computed for all steps of a launch at once with NumPy.

An island of a device loop (:class:`~tempo.runtime.backends.jax.Island`) reads,
at each step, its symbol values (``eval_symbol``), its counter-based random
numbers and the starts of its spatial index reads and writes, all functions of
the step's point. The symbol values and index starts are computed on the
device, in the compiled loop's body, from the loop's counter
(:mod:`tempo.runtime.backends.jax_step_values`, the same expressions spelled
with ``jax.numpy``). What the host computes per launch is what the compiled
program depends on or cannot compute: :class:`StepValues` evaluates the index
expressions (affine forms, ``min``, ``max``, ``//`` and ``%`` of counters and
bounds) once per launch over arrays of the launch's counters, every step of
every nested loop included, for their forms (a point or a slice of one size
at every step: the compiled program's static key), and draws the
counter-based random numbers of all the launch's steps in one call
(:class:`Draw`: the same bits as the op's NumPy kernel draws point by point),
but those the compiled program draws itself, whose shapes are part of its
static key. The host's work per launch grows with the number of expressions
and with the numbers it draws, not otherwise with the launch's steps.
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping

import numpy as np

from tempo.ir import ops
from tempo.runtime import counter_rng
from tempo.symbolic.evaluate import to_python
from tempo.symbolic.expr import Expr, bound_of, seq

_NP = {"add": "({} + {})", "mul": "({} * {})", "floordiv": "({} // {})", "mod": "({} % {})",
       "lt": "({} < {})", "le": "({} <= {})", "eq": "({} == {})", "ne": "({} != {})",
       "and": "({} & {})", "or": "({} | {})", "min": "min_({})", "max": "max_({})", "not": "(~{})",
       "slice": "Span({}, {})"}


class Span:
    """A slice whose start and stop are arrays over a launch's steps."""

    def __init__(self, start, stop):
        self.start, self.stop = start, stop


def vector_expr(e: Expr, minimum: Callable = np.minimum,
                maximum: Callable = np.maximum) -> Callable[[Mapping[str, object]], object]:
    """A function ``env -> value`` computing ``e`` where the symbols' values are ints or int64
    arrays of the same length (a launch's steps): arrays, :class:`Span` for slices, tuples for seqs.
    ``minimum`` and ``maximum``: the elementwise functions of the arrays' library (``jnp.minimum``
    for traced values)."""
    names = {"min_": lambda *args: functools.reduce(minimum, args),
             "max_": lambda *args: functools.reduce(maximum, args), "Span": Span}
    return eval(f"lambda env: {to_python(e, spelling=_NP)}", {"__builtins__": {}, **names})  # noqa: S307


def _per_step(value, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, dtype=np.int64), (n,))


def index_form(items: tuple, n: int) -> tuple | None:
    """The form of a spatial index evaluated over ``n`` steps, as
    :func:`~tempo.runtime.backends.jax._index_form` gives it at each; None where the form differs
    between steps."""
    ok, sizes = np.ones(n, dtype=bool), []
    for item in items:
        if isinstance(item, Span):
            start, stop = _per_step(item.start, n), _per_step(item.stop, n)
            ok &= (0 <= start) & (start <= stop)
            sizes.append(stop - start)
        else:
            ok &= _per_step(item, n) >= 0
            sizes.append(None)
    if ok.all():
        if any(size is not None and (size != size[0]).any() for size in sizes):
            return None
        return "dynamic", tuple(None if size is None else int(size[0]) for size in sizes)
    if ok.any():
        return None
    values = [(_per_step(i.start, n), _per_step(i.stop, n)) if isinstance(i, Span) else _per_step(i, n)
              for i in items]
    if any((v[0] != v[0][0]).any() or (v[1] != v[1][0]).any() if isinstance(v, tuple) else (v != v[0]).any()
           for v in values):
        return None
    return "static", tuple((int(v[0][0]), int(v[1][0]), None) if isinstance(v, tuple) else int(v[0])
                           for v in values)


class Draw:
    """A random op's numbers at every step of a launch, drawn at once from the counter-based
    generator (:mod:`tempo.runtime.counter_rng`): the numbers its NumPy kernel draws at each step's
    point, stacked."""

    def __init__(self, op: ops.RandomOp):
        axis_of = {d: k for k, d in enumerate(op.vectorized)}
        self.op, self.axes = op, [axis_of.get(d) for d in op.dims]
        self.offsets = op.offsets or (0,) * len(op.dims)
        self.bounds = [bound_of(d).name for d in op.vectorized]
        self.sizes = [d if isinstance(d, int) else vector_expr(d) for d in op.shape]

    def shape(self, at: dict, n: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The leading axes (the vectorized dims') and the op's shape of the numbers at each of ``n``
        steps (``at``: the bounds, and the counters as arrays); None where the shape differs between steps."""
        sizes = [d if isinstance(d, int) else _per_step(d(at), n) for d in self.sizes]
        if any(not isinstance(d, int) and (d != d[0]).any() for d in sizes):
            return None
        return tuple(int(at[b]) for b in self.bounds), tuple(d if isinstance(d, int) else int(d[0]) for d in sizes)

    def over(self, at: dict, points: np.ndarray, n: int) -> np.ndarray | None:
        """The numbers at the ``n`` points (rows of ``points``), shaped ``(n, *lead, *shape)``; None
        where the shape differs between steps."""
        shaped = self.shape(at, n)
        if shaped is None:
            return None
        lead, shape = shaped
        coords, column = [], iter(range(points.shape[1]))
        for axis, offset in zip(self.axes, self.offsets):
            if axis is None:
                coords.append((points[:, next(column)] + offset).reshape((n,) + (1,) * len(lead)))
            else:
                form = [1] * (1 + len(lead))
                form[1 + axis] = lead[axis]
                coords.append(offset + np.arange(lead[axis]).reshape(form))
        drawn = counter_rng.DISTRIBUTIONS[self.op.dist](self.op.stream, coords, shape, self.op.dtype)
        return np.ascontiguousarray(np.broadcast_to(drawn, (n, *lead, *shape)))


class StepValues:
    """One island step's index forms and host values over all steps of a launch (see the module
    docstring): its point's dims, then its index forms and random numbers, evaluated on arrays.
    ``on_device``: the island steps whose random numbers the compiled program draws."""

    def __init__(self, island, step, on_device: frozenset = frozenset()):
        self.domain = [d.name for d in step.node.domain]
        self.point = vector_expr(seq(*step.execute.point))
        symbols = {j for j, s in enumerate(island.steps) if isinstance(s.op, ops.EvalSymbolOp) and not s.op.vectorized}
        random = {j: Draw(s.op) for j, s in enumerate(island.steps) if isinstance(s.op, ops.RandomOp)}
        self.draws = [(j, draw) for j, draw in random.items() if j not in on_device]
        self.shaped = [(j, draw) for j, draw in random.items() if j in on_device]
        self.drawn = [(j, kernel) for j, kernel in island.host if j not in symbols | random.keys()]
        self.indexes = [(j, vector_expr(index.expr)) for j, index in island.indexes]

    def over(self, env: dict, n: int) -> tuple[tuple, dict] | None:
        """The forms (each index's, then each random step's on the device: its leading axes and shape)
        and the host values (``h{j}``: random numbers and the other host steps' values) stacked over
        ``n`` steps, from ``env``: the bounds as ints and the loops' counters as arrays of ``n`` (a
        step of each); None where a form differs between steps."""
        at = dict(env, **dict(zip(self.domain, (_per_step(p, n) for p in self.point(env)))))
        forms = []
        for form in [index_form(fn(at), n) for _, fn in self.indexes] + [d.shape(at, n) for _, d in self.shaped]:
            if form is None:
                return None
            forms.append(form)
        args = {}
        if self.draws or self.drawn:
            points = np.stack([_per_step(at[d], n) for d in self.domain], axis=1) if self.domain else \
                np.zeros((n, 0), dtype=np.int64)
            for j, draw in self.draws:
                args[f"h{j}"] = draw.over(at, points, n)
                if args[f"h{j}"] is None:
                    return None
            if self.drawn:  # the other host steps, step by step at each point
                args.update(self._each_step(at, points, n))
        return tuple(forms), args

    def _each_step(self, at: dict, points: np.ndarray, n: int) -> dict:
        """The values of the host steps that are neither random draws nor symbol values, their kernels
        called at each of the ``n`` points, stacked."""
        values: dict[str, list] = {f"h{j}": [] for j, _ in self.drawn}
        for k in range(n):
            one = {name: (int(v[k]) if isinstance(v, np.ndarray) else v) for name, v in at.items()}
            point = tuple(int(p) for p in points[k])
            for j, kernel in self.drawn:
                values[f"h{j}"].append(kernel([], one, point)[0])
        return {name: np.stack(rows) for name, rows in values.items()}
