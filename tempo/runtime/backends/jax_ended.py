"""The rows of a loop that ends at run time (``tpo.end_when``) inside a JAX device loop.

The ended loop is a ``lax.while_loop`` that writes each step's rows into
buffers of the cap (:func:`until`); the rows of steps it does not run stay
zeros. The statements after it that read those rows padded
(:attr:`tempo.plan.loop_plan.LoopPlan.padded`) mask their inputs and outputs
past ``T[i]`` where an op would turn the zeros into something else
(:func:`padded_axes`, :func:`masked`), and a mean over padded rows divides
their sum by the count before the end (:func:`mean`).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from tempo.plan.ended_loops import last_row
from tempo.plan.ended_rows import island_axes, masked_steps, mean_counts
from tempo.plan.loop_plan import LOCAL, ROWS, LoopPlan
from tempo.runtime.backends import jax_layout
from tempo.runtime.backends.jax_step_values import device_expr
from tempo.symbolic.expr import bound_of


def until(body: Callable, ring0, xs, shaped, ran, trips: int):
    """A loop that holds its dim's end check as a ``lax.while_loop`` over at most ``ran`` of the ``trips``
    rows of ``xs``, until the step whose flag (``body``'s last output) holds: each step's outputs are
    written into its row of buffers of ``trips`` rows, those of the steps it does not run left zeros."""
    ys0 = jax.tree_util.tree_map(lambda a: jnp.zeros((trips,) + a.shape, a.dtype), shaped)

    def going(state):
        k, ended, _, _ = state
        return (k < ran) & ~ended

    def step(state):
        k, _, ring, ys = state
        x = jax.tree_util.tree_map(lambda a: lax.dynamic_index_in_dim(a, k, keepdims=False), xs)
        ring, y = body(ring, x)
        ys = jax.tree_util.tree_map(lambda rows, row: lax.dynamic_update_index_in_dim(rows, row, k, 0), ys, y)
        return k + 1, y[-1], ring, ys

    _, _, ring, ys = lax.while_loop(going, step, (jnp.int32(0), jnp.bool_(False), ring0, ys0))
    return ring, ys


def masked(value, axes: tuple[tuple[int, int], ...], length):
    """``value`` with its entries at and past ``length + c`` along each ``(axis, c)`` of ``axes`` set to
    zero (a :class:`~tempo.runtime.backends.jax_layout.Permuted` value masked in its own layout, a
    :class:`~tempo.runtime.backends.jax_native.RowMasked` one computed first)."""
    if not axes:
        return value
    if isinstance(value, jax_layout.RowMasked):
        return masked(jax_layout.unmasked(value), axes, length)
    if isinstance(value, jax_layout.Permuted):
        return jax_layout.Permuted(masked(value.base, tuple((value.perm[a], c) for a, c in axes), length),
                                   value.perm)
    keep = None
    for a, c in axes:
        inside = lax.broadcasted_iota(jnp.int32, value.shape, a) < length + c
        keep = inside if keep is None else keep & inside
    return jnp.where(keep, value, jnp.zeros((), value.dtype))


def mean(total, count: Callable, env: dict):
    """A mean from the ``total`` of the rows it averages and their ``count`` (of ``env``: ``T`` at ``T[i]``),
    divided as the host divides the sum of the rows before the end by their number."""
    total = jax_layout.materialised(total)
    return total / jnp.asarray(count(env)).astype(total.dtype)


def padded_axes(plan: LoopPlan, sdg) -> dict:
    """Per step of ``plan.padded``, the padded axes of its inputs to mask (none of an input that holds
    zeros past the end already: :func:`zero_past_end`) and of its ops' outputs, its means over padded
    axes with their counts (:func:`tempo.plan.ended_rows.mean_counts`, of the traced bounds) and its
    inputs that read the ended loop's row at ``T - 1`` (:func:`tempo.plan.ended_loops.last_row`)."""
    if plan.padded_dim is None:
        return {}
    bound = bound_of(plan.padded_dim)
    zeros = zero_past_end(plan)
    out = {}
    for s in plan.padded:
        step = plan.steps[s]
        node = step.node
        shapes = [sdg.read_shape(e) for e in sdg.in_edges(node.id)]
        ins, outs = island_axes(node.op, shapes, list(node.shapes), bound)
        masked = masked_steps(node.op, ins, outs)
        counts = {j: device_expr(count) for j, count in mean_counts(node.op, shapes, ins, outs).items()}
        last = {k for k, src in enumerate(step.inputs) if src.key[0] in zeros and last_row(src, bound)}
        ins = [() if src.kind in (LOCAL, ROWS) and src.key[0] in zeros else axes for src, axes in zip(step.inputs, ins)]
        out[s] = (ins, [axes if j in masked else [()] * len(axes) for j, axes in enumerate(outs)], counts, last)
    return out


def zero_past_end(plan: LoopPlan) -> set[int]:
    """The nodes whose values in an iteration of ``plan`` (a loop that holds the loop over a dim that ends
    at run time) hold zeros past ``T[i]``: the rows of that loop (it skips every step after the end,
    whose rows stay zeros), those of a nested loop run to ``T`` and the outputs of the steps that read
    padded rows (both masked past the end); empty in any other loop."""
    if plan.ending is None:
        return set()
    to_cap = [n.plan for k, n in enumerate(plan.nested) if k == plan.ending or n.plan.padded_dim is not None]
    return {step.node.id for loop in to_cap for step in loop.steps} | {plan.steps[s].node.id for s in plan.padded}
