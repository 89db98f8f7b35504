"""An island step's symbol values and index starts computed on the device, in a compiled loop's body.

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
"""
from __future__ import annotations

import jax.numpy as jnp

from tempo.ir import ops
from tempo.runtime.step_values import Span, vector_expr
from tempo.symbolic.expr import Expr, seq


def device_expr(e: Expr):
    """``env -> value``: ``e`` where the symbols' values are traced integer scalars."""
    return vector_expr(e, jnp.minimum, jnp.maximum)


class DeviceValues:
    """One island step's symbol values and index starts at one step of a compiled loop."""

    def __init__(self, island, step):
        self.domain = [d.name for d in step.node.domain]
        self.point = device_expr(seq(*step.execute.point))
        symbols = [(j, s.op.expr) for j, s in enumerate(island.steps)
                   if isinstance(s.op, ops.EvalSymbolOp) and not s.op.vectorized]
        self.symbols = [(j, device_expr(e)) for j, e in symbols]
        self.indexes = [(j, device_expr(index.expr)) for j, index in island.indexes]
        exprs = (*step.execute.point, *(e for _, e in symbols), *(index.expr for _, index in island.indexes))
        self.names = sorted({x.name for e in exprs for x in e.free_symbols()} - set(self.domain))

    def __call__(self, env: dict, forms: dict) -> tuple[dict, dict]:
        """The symbol values (by island step) and the starts of the indexes of a dynamic form (by
        island step; ``forms``: each index's form, as the static key holds it) at the step whose
        counters and bounds ``env`` holds."""
        at = dict(env, **dict(zip(self.domain, self.point(env))))
        given = {j: jnp.asarray(fn(at), dtype=jnp.int64) for j, fn in self.symbols}
        return given, {j: index_starts(fn, at, forms[j]) for j, fn in self.indexes}


def index_starts(index, env: dict, form: tuple):
    """The starts (int64, one per item) of the spatial index ``index`` (a :func:`device_expr` of a
    seq) at ``env`` where its form is dynamic; none where it is static (its values are in the form)."""
    if form[0] != "dynamic" or not form[1]:
        return jnp.zeros(0, dtype=jnp.int64)
    return jnp.stack([jnp.asarray(i.start if isinstance(i, Span) else i, dtype=jnp.int64) for i in index(env)])
