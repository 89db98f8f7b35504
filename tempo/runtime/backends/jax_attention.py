"""A decoding step's softmax attention in a JAX island as one native call for every (sequence, head) pair.

A decoding step's attention (``tempo.llm.program.attend``: the scores
against the keys of each part, the K/V buffer's and the prompt's, one
softmax over all of them, the products with the values) is a chain of about
twenty steps of a layer's island. Traced step by step it is two native
products per part (:func:`.jax_native.stacked_product`) with the softmax
between them in XLA, over every row of a K/V buffer, written or not, the
scores leaving the cache between the passes. :func:`find` finds that chain
in an island's steps::

    top = maximum over the parts of max(scores_i, axis=-1, keepdims=True)
    w_i = exp(scores_i - top)
    d = (w_1 @ values_1 + ...) / (sum(w_1, axis=-1, keepdims=True) + ...)

(a part of one row, a one-token prompt's, may have its max and sum left out)
each part's scores ``permute(keys_i @ qt, (0, 1, 3, 2)) * scale`` for one
``qt`` (the queries transposed: (batch, kv heads, head size, groups)), and
each part optionally masked to the rows a bool vector keeps, as the
masked-reads pass (:mod:`tempo.transforms.masked_reads`) and a window's or a
masked program's scores spell it: ``where(rows, x, fill)`` on its keys, its
scores before the largest or before the exponentials (``-inf``), its weights
before their sum and before their product (0), or its values. A part's masks
are one vector (the same steps), and its weights are zero past it (its
scores masked with ``-inf`` before the exponentials, or its weights masked
before both the sum and the product). ``top`` only shifts the exponentials,
which the result does not depend on.

:func:`attend` computes such a chain as one call of ``attend_steps``
(``numpy_attention.c``, through :func:`.jax_native.attention_call`), reading
each part's keys and values where they lie, at the rows its mask keeps: a
decoding step reads the positions written so far, and its scores stay in
the cache. The fills and scales are island inputs, known at run time: the
call runs under a ``lax.cond`` that checks them (each mask's fill the one
that drops the row, every part's scale the same, each mask one run of rows),
the chain's own steps the other branch. Where the call does not apply at
trace time (another dtype, more than 4 query groups a head or parts, a head
size that is not a multiple of 16 up to 64, a mask that varies along another
axis, not a CPU, the library not built) the chain's steps run as before. The
sums run in the kernel's order: the same attention to float32 rounding.
Values past a mask are read by the steps (times a weight of 0) and skipped by
the call: the two agree where they are finite, as a K/V buffer's rows are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from tempo.ir import ops
from tempo.runtime.backends import jax_layout, jax_native
from tempo.symbolic.expr import Expr

Ref = tuple[int, int]  # (step, output); step -1: the island's input
ZERO, NO_ROW, FINITE, ANY = "zero", "-inf", "finite", "any"  # what a mask's fill must be


@dataclass(frozen=True)
class Mask:
    """A ``where(rows, x, fill)`` of a part: its condition, the axis of ``x`` (from the end) that
    ``rows`` runs along, its fill and what the fill must be (:data:`ZERO`, ...)."""

    rows: Ref
    axis: int
    fill: Ref
    need: str


@dataclass(frozen=True)
class Part:
    """A part of the attention: its keys and values (the products' operands, before their masks),
    its scale, its masks, and whether the chain leaves out its sum or its largest score (the value
    itself: a part of one row)."""

    keys: Ref
    values: Ref
    scale: Ref
    masks: tuple[Mask, ...]
    one: bool


@dataclass(frozen=True)
class Attention:
    """An attention chain: the steps it replaces in order (the division last), the transposed
    queries and its parts."""

    steps: tuple[int, ...]
    qt: Ref
    parts: tuple[Part, ...]


def find(steps: tuple[ops.FusedStep, ...], outputs: tuple[Ref, ...]) -> dict[int, Attention]:
    """The attention chains among an island's ``steps``, by the step of their division: those whose
    other steps are float32, read by the chain alone and not the island's ``outputs``."""
    readers: dict[int, set[int]] = {}
    for s, step in enumerate(steps):
        for j, _ in step.inputs:
            readers.setdefault(j, set()).add(s)
    out = {j for j, _ in outputs}
    found = {}
    for d in range(len(steps)):
        match = _match(steps, d)
        if match is None:
            continue
        inner = set(match.steps[:-1])
        if (inner & out or any(not readers.get(j, set()) <= inner | {d} for j in inner)
                or any(steps[j].dtypes != ("float32",) for j in match.steps)):
            continue
        found[d] = match
    return found


def _match(steps, d: int) -> Attention | None:
    """The chain that :func:`find` describes ending at step ``d``, or None."""
    chain: set[int] = set()

    def step(ref, kind, fn=None):
        j, k = ref
        if j < 0 or k or not isinstance(steps[j].op, kind) or (fn is not None and steps[j].op.fn != fn):
            return None
        return steps[j]

    def leaves(ref, fn):
        node = step(ref, ops.ElementwiseOp, fn)
        if node is None or len(node.inputs) != 2:
            return [ref]
        chain.add(ref[0])
        return leaves(node.inputs[0], fn) + leaves(node.inputs[1], fn)

    def unmasked(ref, axis: int, need: str, masks: list | None) -> Ref:
        """``x`` of ``where(rows, x, fill)`` at ``ref`` (its mask added to ``masks``), else ``ref``."""
        node = step(ref, ops.ElementwiseOp, "where")
        if node is None:
            return ref
        chain.add(ref[0])
        if masks is not None:
            masks.append(Mask(node.inputs[0], axis, node.inputs[2], need))
        return node.inputs[1]

    def last_axis(ref, fn):
        node = step(ref, ops.ReduceOp, fn)
        if node is None or not node.op.keepdims or node.op.ordered or node.op.axes not in ((-1,), (3,)):
            return None
        chain.add(ref[0])
        return node.inputs[0]

    div = step((d, 0), ops.ElementwiseOp, "div")
    if div is None or len(div.inputs) != 2:
        return None
    parts: dict[Ref, dict] = {}  # exponentials -> what the part has
    for ref in leaves(div.inputs[0], "add"):
        product = step(ref, ops.MatMulOp)
        if product is None or product.op.ordered_rows or product.op.ordered_inner:
            return None
        chain.add(ref[0])
        masks: list[Mask] = []
        weights = unmasked(product.inputs[0], 1, ZERO, masks)
        if weights in parts:
            return None
        parts[weights] = {"masks": masks, "zeroed": {"product": bool(masks)}}
        parts[weights]["values"] = unmasked(product.inputs[1], 2, FINITE, masks)
    for ref in leaves(div.inputs[1], "add"):
        summed = last_axis(ref, "sum")
        masks = []
        weights = unmasked(ref if summed is None else summed, 1, ZERO, masks)
        if weights not in parts or "sum" in parts[weights]["zeroed"]:
            return None
        parts[weights]["one"] = summed is None
        parts[weights]["zeroed"]["sum"] = bool(masks)
        parts[weights]["masks"] += masks
    if any("sum" not in p["zeroed"] for p in parts.values()):
        return None
    top, qt, scores_of = None, None, {}
    for ref, part in parts.items():
        exp = step(ref, ops.ElementwiseOp, "exp")
        sub = exp and step(exp.inputs[0], ops.ElementwiseOp, "sub")
        if sub is None or top not in (None, sub.inputs[1]):
            return None
        top = sub.inputs[1]
        chain |= {ref[0], exp.inputs[0][0]}
        masks, zeroed = part["masks"], part["zeroed"]
        scaled_ref = unmasked(sub.inputs[0], 1, NO_ROW, masks)
        scaled = step(scaled_ref, ops.ElementwiseOp, "mul")
        side = scaled and next((k for k in (0, 1) if (p := step(scaled.inputs[k], ops.PermuteOp)) is not None
                                and p.op.axes == (0, 1, 3, 2)), None)
        if side is None:
            return None
        permute = scaled.inputs[side]
        product = step(steps[permute[0]].inputs[0], ops.MatMulOp)
        if (product is None or product.op.ordered_rows or product.op.ordered_inner
                or qt not in (None, product.inputs[1])):
            return None
        qt = product.inputs[1]
        chain |= {scaled_ref[0], permute[0], steps[permute[0]].inputs[0][0]}
        keys = unmasked(product.inputs[0], 2, ANY, masks)
        scores_of[scaled_ref] = scores_of[sub.inputs[0]] = ref
        dropped = scaled_ref != sub.inputs[0] or zeroed["product"] and zeroed["sum"]  # weights 0 past the mask
        if masks and not dropped or len({_mask_source(steps, m.rows) for m in masks}) > 1:
            return None
        part.update(keys=keys, scale=scaled.inputs[1 - side])
    for ref in leaves(top, "maximum"):
        peak = last_axis(ref, "max")
        scores = unmasked(ref if peak is None else peak, 1, ANY, None)
        if scores not in scores_of:
            return None
        parts[scores_of[scores]]["one"] |= peak is None
    return Attention(tuple(sorted(chain)) + (d,), qt, tuple(Part(p["keys"], p["values"], p["scale"], tuple(p["masks"]),
                                                                 p["one"]) for p in parts.values()))


def _mask_source(steps, ref: Ref):
    """A key equal for two conditions computed by the same steps from the same inputs (their
    reshapes left out)."""
    j, k = ref
    while j >= 0 and isinstance(steps[j].op, ops.ReshapeOp):
        j, k = steps[j].inputs[0]
    if j < 0:
        return ("input", k)
    step = steps[j]
    return (type(step.op), tuple(_field(getattr(step.op, f.name)) for f in fields(step.op)), k,
            tuple(_mask_source(steps, r) for r in step.inputs))


def _field(value):
    """An op's field as a key: expressions by identity (they are interned), tuples item by item."""
    if isinstance(value, tuple):
        return tuple(_field(v) for v in value)
    if isinstance(value, Expr):
        return ("expr", id(value))
    return value if isinstance(value, (str, int, float, bool, type(None))) else ("object", id(value))


def attend(match: Attention, value: Callable[[Ref], object], replay: Callable[[], object]):
    """The chain ``match``'s result: one native call under the run-time check of its masks' fills,
    its scales and its masks' runs, ``replay()`` (the chain's steps traced) where the check fails
    or the call does not apply. ``value(ref)``: a read's traced value."""
    qt = value(match.qt)
    if qt.ndim != 4:
        return replay()
    parts, checks, scales = [], [], []
    for part in match.parts:
        keys, values, scale = value(part.keys), value(part.values), value(part.scale)
        if any(isinstance(x, jax_native.RowMasked) for x in (keys, values, scale)) or math.prod(scale.shape) != 1:
            return replay()
        count = keys.shape[-2]
        if part.one and count != 1:
            return replay()
        rows = None
        for mask in part.masks:
            cond, fill = value(mask.rows), value(mask.fill)
            if (not _along(cond, mask.axis, count) or isinstance(fill, (jax_layout.Permuted, jax_native.RowMasked))
                    or jnp.ndim(fill) != 0):
                return replay()
            rows = jax_layout.materialised(cond).reshape(count) if rows is None else rows
            checks.append(_fill_ok(fill, mask.need))
        if rows is None:
            rows = jnp.ones((count,), bool)
        else:
            checks.append(jnp.sum(rows[1:] & ~rows[:-1]) + rows[0] <= 1)  # one run of rows kept
        parts.append((keys, values, rows))
        scales.append(jnp.reshape(jax_layout.materialised(scale), ()).astype(np.float32))
    checks += [s == scales[0] for s in scales[1:]]
    q = jnp.swapaxes(jax_layout.materialised(qt), -1, -2)
    call = jax_native.attention_call(q, parts, scales[0])
    if call is None:
        return replay()
    if not checks:
        return call()
    return lax.cond(jnp.all(jnp.stack(checks)), call, lambda: jax_layout.materialised(replay()))


def _along(cond, axis: int, count: int) -> bool:
    """Whether ``cond`` is a bool vector of ``count`` rows along the axis ``axis`` from the end of
    what it masks (every other axis of 1)."""
    if isinstance(cond, (jax_layout.Permuted, jax_native.RowMasked)) or cond.dtype != np.bool_:
        return False
    shape = tuple(cond.shape)
    return len(shape) >= axis and shape[-axis] == count and all(n == 1 for a, n in enumerate(shape)
                                                                 if a != len(shape) - axis)


def _fill_ok(fill, need: str):
    """Whether the fill ``fill`` drops the masked rows as ``need`` asks (a traced bool)."""
    if need == ZERO:
        return fill == 0
    if need == NO_ROW:
        return fill == -jnp.inf
    if need == FINITE:
        return jnp.isfinite(fill)
    return jnp.asarray(True)
