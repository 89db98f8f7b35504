"""An island step's symbol values, index starts and uniform random numbers computed on the device, in a
compiled loop's body.

The body of a device loop (:mod:`tempo.runtime.backends.jax_loops`) knows
its step's counters: the launch's first counter (or, in a nested loop, its
start evaluated on the enclosing loop's counters) plus the scan's index.
:class:`DeviceValues` evaluates an island step's point, its symbol values
(``eval_symbol``) and the starts of its spatial index reads and writes as
``jax.numpy`` expressions of those counters and the run's bounds (traced
int64 scalars), so that the host hands a launch no per-step arrays of them.
The expressions are those :mod:`tempo.runtime.step_values` evaluates with
NumPy for the index forms, spelled with ``jnp.minimum``/``jnp.maximum``;
``//`` and ``%`` of traced integers round as Python's do, so the values are
those the host computes at each step, bit for bit (int64).

Uniform random numbers are drawn there too, from the step's point: the
counter-based generator's SplitMix64 mixing (:mod:`tempo.runtime.counter_rng`)
in ``uint64`` arithmetic, which wraps as NumPy's does, and its conversion to
floats, exact in both (the top 24 or 53 bits times a power of two), so the
numbers are the NumPy kernel's, bit for bit; their shape (the leading axes of
the vectorized dims and the op's shape) is part of the compiled loop's
static key. Normal numbers go through ``log`` and ``cos``, whose last bits
XLA's and the C library's differ in: the host draws them.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from tempo.ir import ops
from tempo.runtime import counter_rng
from tempo.runtime.step_values import Span, vector_expr
from tempo.symbolic.expr import Expr, seq


def device_expr(e: Expr):
    """``env -> value``: ``e`` where the symbols' values are traced integer scalars."""
    return vector_expr(e, jnp.minimum, jnp.maximum)


def drawn_on_device(island) -> list[tuple[int, ops.RandomOp]]:
    """The island's random steps whose numbers the device draws (uniform ones), by island step."""
    return [(j, s.op) for j, s in enumerate(island.steps) if isinstance(s.op, ops.RandomOp) and s.op.dist == "uniform"]


class DeviceValues:
    """One island step's symbol values, index starts and uniform random numbers at one step of a
    compiled loop."""

    def __init__(self, island, step):
        self.domain = [d.name for d in step.node.domain]
        self.point = device_expr(seq(*step.execute.point))
        symbols = [(j, s.op.expr) for j, s in enumerate(island.steps)
                   if isinstance(s.op, ops.EvalSymbolOp) and not s.op.vectorized]
        self.symbols = [(j, device_expr(e)) for j, e in symbols]
        self.indexes = [(j, device_expr(index.expr)) for j, index in island.indexes]
        self.draws = drawn_on_device(island)
        self.keyed = [j for j, _ in island.indexes] + [j for j, _ in self.draws]  # the static key's forms, in order
        exprs = (*step.execute.point, *(e for _, e in symbols), *(index.expr for _, index in island.indexes))
        self.names = sorted({x.name for e in exprs for x in e.free_symbols()} - set(self.domain))

    def __call__(self, env: dict, forms: dict) -> tuple[dict, dict]:
        """The symbol values and random numbers (by island step) and the starts of the indexes of a
        dynamic form (by island step; ``forms``: each index's form and each draw's shape, as the static
        key holds them) at the step whose counters and bounds ``env`` holds."""
        point = self.point(env)
        at = dict(env, **dict(zip(self.domain, point)))
        given = {j: jnp.asarray(fn(at), dtype=jnp.int64) for j, fn in self.symbols}
        given.update({j: uniform(op, point, *forms[j]) for j, op in self.draws})
        return given, {j: index_starts(fn, at, forms[j]) for j, fn in self.indexes}


def index_starts(index, env: dict, form: tuple):
    """The starts (int64, one per item) of the spatial index ``index`` (a :func:`device_expr` of a
    seq) at ``env`` where its form is dynamic; none where it is static (its values are in the form)."""
    if form[0] != "dynamic" or not form[1]:
        return jnp.zeros(0, dtype=jnp.int64)
    return jnp.stack([jnp.asarray(i.start if isinstance(i, Span) else i, dtype=jnp.int64) for i in index(env)])


_U64 = jnp.uint64


def _mix(x):
    """SplitMix64's finaliser on uint64 values (:func:`tempo.runtime.counter_rng.mix_int`)."""
    x = (x ^ (x >> _U64(30))) * _U64(counter_rng.M1)
    x = (x ^ (x >> _U64(27))) * _U64(counter_rng.M2)
    return x ^ (x >> _U64(31))


def uniform(op: ops.RandomOp, point: tuple, lead: tuple[int, ...], shape: tuple[int, ...]):
    """``op``'s uniform numbers at ``point`` (traced int64 scalars, the step's point), shaped
    ``lead + shape``: :func:`tempo.runtime.counter_rng.uniform` at the coordinates the NumPy kernel
    gives them (each point coordinate, or a vectorized dim's index along its leading axis, plus its offset)."""
    axis_of = {d: k for k, d in enumerate(op.vectorized)}
    points, golden = iter(point), _U64(counter_rng.GOLDEN)
    key = _U64(counter_rng.mix_int((int(op.stream) + counter_rng.GOLDEN) & (2 ** 64 - 1)))
    for d, offset in zip(op.dims, op.offsets or (0,) * len(op.dims)):
        axis = axis_of.get(d)
        if axis is None:
            coord = jnp.asarray(next(points), dtype=jnp.int64) + offset
        else:
            coord = lax.broadcasted_iota(jnp.int64, tuple(lead[k] if k == axis else 1 for k in range(len(lead))),
                                         axis) + offset
        key = _mix(key ^ (lax.bitcast_convert_type(coord, _U64) + golden))
    count = math.prod(shape)
    counter = (jnp.arange(1, count + 1, dtype=_U64) * golden).reshape(shape)
    bits = jnp.broadcast_to(_mix(jnp.reshape(key, jnp.shape(key) + (1,) * len(shape)) + counter), lead + shape)
    if jnp.dtype(op.dtype) == jnp.float64:
        return (bits >> _U64(11)).astype(jnp.float64) * 2.0 ** -53
    return ((bits >> _U64(40)).astype(jnp.float64) * 2.0 ** -24).astype(op.dtype)
