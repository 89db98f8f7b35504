"""Permutations left lazy while a JAX island is traced: values keep the layout their producer wrote.

An RL learner reads what acting stored time-major (rows of ``t``, each a
batch over ``b``) and, as the user wrote it, permutes it batch-major before
its products (``x[0:B, k, 0:T]``). NumPy permutes by a view; XLA on a CPU
materialises a transposed copy of every such operand before a dot, and
elementwise work on mixed layouts reads with strides. While an island is
traced, a permutation is therefore only noted: a :class:`Permuted` value is
the logical array ``transpose(base, perm)``, and the ops below compute on
``base`` in its own layout:

- elementwise ops whose largest operands share the layout (smaller and
  lower-rank operands are brought into it: a parameter, a scalar);
- reductions (the reduced axes mapped into the layout), casts, squeezes and
  unsqueezes;
- matrix products and batch contractions whose operands agree on the
  layout of their batch axes and keep their matrix axes last (a contraction
  sums over every batch axis, so their order does not matter);
- stacks of products with a few rows or columns on one side, whatever the
  large operand's layout, by the native kernels on a CPU
  (:func:`tempo.runtime.backends.jax_native.stacked_product`: attention's
  products over a K/V buffer of (positions, batch, heads, head size)).

A ``where(rows, x, 0)`` that masks one of ``x``'s matrix axes (the
masked-reads pass's mask of a K/V buffer's rows past the current position)
is noted too (:class:`~tempo.runtime.backends.jax_native.RowMasked`): a
stacked product reads only the rows it keeps, so a decoding step reads the
positions so far, not the whole buffer; any other op gets it materialised.

Any other op gets its operands materialised (``jnp.transpose``), as do the
island's outputs, so what leaves the island is what the op-by-op trace
computes; only the order of a reduction's terms may differ (float rounding).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import jax.numpy as jnp
import numpy as np

from tempo.ir import ops
from tempo.runtime.backends import jax_native
from tempo.runtime.backends.jax_native import RowMasked
from tempo.runtime.backends.jax_ops import rows_contract


class Permuted:
    """The logical array ``jnp.transpose(base, perm)``, not materialised (``perm`` never the identity)."""

    __slots__ = ("base", "perm")

    def __init__(self, base, perm: tuple[int, ...]):
        self.base, self.perm = base, perm

    @property
    def ndim(self) -> int:
        return len(self.perm)

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.base.shape[p] for p in self.perm)

    def astype(self, dtype):
        return Permuted(self.base.astype(dtype), self.perm)


def permuted(base, perm: tuple[int, ...]):
    """``transpose(base, perm)`` as a :class:`Permuted` value (``base`` itself for the identity)."""
    return base if perm == tuple(range(len(perm))) else Permuted(base, perm)


def materialised(x):
    """A traced value as a plain array."""
    if isinstance(x, RowMasked):
        return x.dense()
    return jnp.transpose(x.base, x.perm) if isinstance(x, Permuted) else x


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for k, p in enumerate(perm):
        out[p] = k
    return tuple(out)


def _into(x, perm: tuple[int, ...]):
    """The base of logical ``x`` (of rank ``len(perm)`` or lower, broadcast from the right) in layout ``perm``."""
    rank = len(perm)
    if isinstance(x, Permuted) and x.perm == perm:
        return x.base
    k = jnp.ndim(x.base) if isinstance(x, Permuted) else jnp.ndim(x)
    if k < rank and all(perm[j] == j for j in range(rank - k, rank)) and \
            sorted(perm[:rank - k]) == list(range(rank - k)):
        return materialised(x)  # broadcasts over the permuted leading axes as it is
    logical = jnp.reshape(materialised(x), (1,) * (rank - k) + tuple(jnp.shape(materialised(x))))
    return jnp.transpose(logical, _inverse(perm))


def _leading(args: list) -> Permuted | None:
    """The permuted operand of highest rank and most elements, if any."""
    candidates = [a for a in args if isinstance(a, Permuted)]
    if not candidates:
        return None
    return max(candidates, key=lambda a: (a.ndim, int(np.prod(a.base.shape))))


def unmasked(x: RowMasked):
    """The masked value computed, in its value's layout."""
    if not isinstance(x.value, Permuted):
        return x.dense()
    base, perm = x.value.base, x.value.perm
    column = x.rows.reshape(tuple(-1 if a == perm[x.axis] else 1 for a in range(len(perm))))
    return Permuted(jnp.where(column, base, jnp.asarray(x.fill, base.dtype)), perm)


def _row_masked(cond, x, fill) -> RowMasked | None:
    """``where(cond, x, fill)`` as a :class:`RowMasked` value where ``fill`` is a scalar, ``x``
    float32 and ``cond`` a bool vector along one of ``x``'s matrix axes (the masked-reads pass's mask
    of a K/V buffer's rows before a product); else None."""
    if (isinstance(fill, (Permuted, RowMasked)) or isinstance(cond, (Permuted, RowMasked))
            or isinstance(x, RowMasked) or jnp.ndim(fill) != 0 or x.dtype != np.float32
            or cond.dtype != np.bool_ or not 0 < jnp.ndim(cond) <= x.ndim or not jax_native.runs_here()):
        return None
    over = [j for j, d in enumerate(cond.shape) if d > 1]
    if len(over) != 1:
        return None
    axis = x.ndim - jnp.ndim(cond) + over[0]
    if axis < x.ndim - 2 or cond.shape[over[0]] != x.shape[axis]:
        return None
    return RowMasked(x, cond.reshape(-1), axis, fill)


RULES: dict[type, Callable] = {}  # op type -> (op, args, env, impl) -> tuple of results, or None


def rule(*op_types: type):
    def register(fn):
        for op_type in op_types:
            RULES[op_type] = fn
        return fn

    return register


def run(op: ops.Op, args: list, env: dict, impl: Callable) -> tuple:
    """The results of ``op`` on traced ``args`` (some :class:`Permuted`); ``impl(op, arrays, env)`` is
    the op's plain implementation."""
    if any(isinstance(a, RowMasked) for a in args):
        if isinstance(op, ops.MatMulOp) and not (op.ordered_rows or op.ordered_inner):
            out = jax_native.stacked_product(*args)
            if out is not None:
                return (out,)
        args = [unmasked(a) if isinstance(a, RowMasked) else a for a in args]
    if isinstance(op, ops.ElementwiseOp) and op.fn == "where":
        masked = _row_masked(*args)
        if masked is not None:
            return (masked,)
    if isinstance(op, ops.PermuteOp) or any(isinstance(a, Permuted) for a in args):
        fn = RULES.get(type(op))
        out = fn(op, args, env, impl) if fn is not None else None
        if out is not None:
            return out
    return impl(op, [materialised(a) for a in args], env)


@rule(ops.PermuteOp)
def _permute(op, args, env, impl):
    x = args[0]
    base, perm = (x.base, x.perm) if isinstance(x, Permuted) else (x, tuple(range(jnp.ndim(x))))
    return (permuted(base, tuple(perm[a % len(perm)] for a in op.axes)),)


@rule(ops.ElementwiseOp)
def _elementwise(op, args, env, impl):
    lead = _leading(args)
    if lead is None or any(jnp.ndim(a) > lead.ndim for a in args if not isinstance(a, Permuted)):
        return None
    perm = lead.perm
    bases = [a if jnp.ndim(a) == 0 and not isinstance(a, Permuted) else _into(a, perm) for a in args]
    return tuple(permuted(v, perm) for v in impl(op, bases, env))


@rule(ops.CastOp)
def _cast(op, args, env, impl):
    x = args[0]
    return (Permuted(impl(op, [x.base], env)[0], x.perm),)


@rule(ops.ReduceOp)
def _reduce(op, args, env, impl):
    x = args[0]
    rank = x.ndim
    axes = sorted({a % rank for a in op.axes})
    if not axes:
        return None
    out = impl(replace(op, axes=tuple(x.perm[a] for a in axes)), [x.base], env)[0]
    if op.keepdims:
        return (permuted(out, x.perm),)
    gone = sorted(x.perm[a] for a in axes)
    kept = [x.perm[k] for k in range(rank) if k not in axes]
    return (permuted(out, tuple(p - sum(g < p for g in gone) for p in kept)),)


@rule(ops.SqueezeOp)
def _squeeze(op, args, env, impl):
    x = args[0]
    a = op.axis % x.ndim
    gone = x.perm[a]
    return (permuted(jnp.squeeze(x.base, axis=gone),
                     tuple(p - (p > gone) for k, p in enumerate(x.perm) if k != a)),)


@rule(ops.UnsqueezeOp)
def _unsqueeze(op, args, env, impl):
    """The new unit axis goes where it keeps the last two logical axes physically last, if they are."""
    x = args[0]
    rank = x.ndim
    a = op.axis if op.axis >= 0 else op.axis + rank + 1
    at = rank if a == rank or x.perm[-1] != rank - 1 else rank - 1
    shifted = [p + (p >= at) for p in x.perm]
    return (permuted(jnp.expand_dims(x.base, at), tuple(shifted[:a]) + (at,) + tuple(shifted[a:])),)


@rule(ops.MatMulOp)
def _matmul(op, args, env, impl):
    """A stack of products with a few rows or columns on one side reads its large operand where its
    base lies, by the native kernels (:func:`.jax_native.stacked_product`: a K/V buffer's heads as
    stored). ``x @ w`` with ``w`` of rank 2 maps ``x``'s last axis: any layout that keeps it last will do.
    Otherwise the batched operands share a layout that keeps their matrix axes last; a rank-2
    operand broadcasts over the batch as it is."""
    a, b = args
    if not (op.ordered_rows or op.ordered_inner):
        out = jax_native.stacked_product(a, b)
        if out is not None:
            return (out,)
    lead = _leading(args)
    rank = lead.ndim
    if lead is a and b.ndim == 2:
        ok = lead.perm[-1] == rank - 1
    else:
        ok = rank >= 3 and _matrix_last(lead.perm)
    if not ok:
        return None
    bases = []
    for x in args:
        if isinstance(x, Permuted) and x.perm == lead.perm:
            bases.append(x.base)
        elif x.ndim == 2:
            bases.append(materialised(x))
        else:
            return None
    return (permuted(impl(op, bases, env)[0], lead.perm),)


@rule(ops.BatchContractOp)
def _batch_contract(op, args, env, impl):
    """``sum over batch and k of a[..., m, k] * b[..., k, n]``: one product of the bases seen as
    ``(rows, m)`` and ``(rows, n)`` when ``m`` and ``n`` are their last axes and the summed axes
    come in the same order in both."""
    a, b = args
    rank = a.ndim
    pa, pb = _perm(a), _perm(b)
    if rank != b.ndim or pa[rank - 2] != rank - 1 or pb[rank - 1] != rank - 1:
        return None
    summed_a = sorted(list(range(rank - 2)) + [rank - 1], key=lambda j: pa[j])
    summed_b = sorted(list(range(rank - 2)) + [rank - 2], key=lambda j: pb[j])
    if [min(j, rank - 2) for j in summed_a] != summed_b:
        return None
    x, y = (_base(v) for v in args)
    common = np.result_type(x.dtype, y.dtype)
    x, y = (v if v.dtype == common else v.astype(common) for v in (x, y))
    return (rows_contract(x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])),)


@rule(ops.LinearScanOp, ops.ScanOp, ops.CumSumOp)
def _along(op, args, env, impl):
    """A scan along one axis, on operands that share the layout."""
    lead = _leading(args)
    if any(jnp.ndim(x) != lead.ndim for x in args):
        return None
    bases = [_into(x, lead.perm) for x in args]
    return tuple(permuted(v, lead.perm) for v in impl(replace(op, axis=lead.perm[op.axis % lead.ndim]), bases, env))


def _matrix_last(perm: tuple[int, ...]) -> bool:
    rank = len(perm)
    return perm[-2:] == (rank - 2, rank - 1)


def _perm(x) -> tuple[int, ...]:
    return x.perm if isinstance(x, Permuted) else tuple(range(jnp.ndim(x)))


def _base(x):
    return x.base if isinstance(x, Permuted) else x
