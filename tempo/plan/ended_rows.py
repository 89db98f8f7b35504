"""Which statements compute, before a dim's end, the same from rows padded to the dim's cap.

A device loop over iterations ``i`` that holds the loop over a dim ``t`` that
ends at run time (``tpo.end_when``; :mod:`tempo.plan.device_loops`) runs
that loop over the cap the run gives ``T`` and skips the steps after the
end, so that ``T[i]`` is a value on the device, not a size the program is
compiled for. The statements after it in the iteration (the learner's
``x[i, 0:T]``, sums over ``t < T[i]``, their gradients) are compiled with
``T`` at the cap: every axis whose size is ``T`` holds the cap's rows, of
which the first ``T[i]`` are the dim's and the others are set to zero (the
statement's inputs and the outputs of each of its ops, masked by a compare
with ``T[i]``). An axis of size ``T + c`` (``c`` a constant: the ``T - 1``
rows of a shift by one step) holds ``T[i] + c`` rows of the dim's and is
padded the same way. A statement computes the same at the dim's rows from
rows so padded where each of its ops does, by a rule registered here for the
op's type: given the padded axes of its inputs and outputs, whether its
outputs before the end are those of the unpadded op.

- an elementwise op, a cast, a copy, a permutation, an expansion: each
  element of the output is computed from elements at the same rows;
- a sum over a padded axis adds zeros (``x + 0 == x``), in index order where
  the sum is ordered (:mod:`tempo.transforms.step_order`); a running or
  discounted sum, in either direction, adds zeros; a product contracting a
  padded axis adds products of zeros;
- a mean over a padded axis is a sum of the padded rows divided by the
  count of the elements before the end (:func:`mean_counts`: an expression
  of ``T``, which the device computes at ``T[i]``);
- a slice along a padded axis from a constant start to ``T + c`` keeps the
  rows before the end in order, and so does a concatenation along one whose last part
  alone is padded (``cat([ones, d[0:T - 1]])``: the step before); an index
  at the dim's own step ``t`` reads a row before the end at every ``t``
  before it;
- a value of ``T`` (``eval_symbol(B * T)``: the divisor of a mean's gradient)
  is computed with ``T`` at ``T[i]``;
- a max or min over a padded axis, a point index, a gather, a pad or any other concatenation along one, a
  reshape that moves one, and every op without a rule: their statement keeps
  its loop on the host, as does one whose sizes mention ``T`` other than as
  ``T + c`` (``B*T`` rows), or whose value does otherwise (a vectorized
  ``eval_symbol(T - 1 - t)``, one value per row).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from tempo.ir import ops
from tempo.symbolic.expr import Expr, step_of
from tempo.symbolic.simplify import simplify

Axes = tuple[tuple[int, int], ...]  # (axis, c): the axis holds T + c rows, T[i] + c of them the dim's
Rule = Callable[[ops.Op, "list[Axes]", "list[Axes]", "list[tuple]", Expr], bool]
RULES: dict[type, Rule] = {}


def rule(*types: type):
    """Register the decorated function as the padded-rows rule of ops of ``types``: ``(op, padded axes of
    each input, padded axes of each output, input shapes, the bound) -> bool`` (see the module docstring)."""
    def register(fn: Rule) -> Rule:
        for t in types:
            RULES[t] = fn
        return fn
    return register


@rule(ops.ElementwiseOp, ops.CastOp, ops.IdentOp, ops.MergeOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp,
      ops.UnsqueezeOp, ops.CumSumOp, ops.ScanOp, ops.LinearScanOp, ops.DiscountedSumOp, ops.MatMulOp,
      ops.BatchContractOp)
def _rowwise(op, ins, outs, shapes, bound) -> bool:
    return True


@rule(ops.ReduceOp)
def _reduce(op: ops.ReduceOp, ins, outs, shapes, bound) -> bool:
    rank = len(shapes[0])
    return op.fn in ("sum", "mean") or not {a % rank for a in op.axes} & _axes(ins[0])


@rule(ops.PadOp, ops.ArgSortOp)
def _along(op, ins, outs, shapes, bound) -> bool:
    return op.axis % len(shapes[0]) not in _axes(ins[0])


@rule(ops.CatOp)
def _cat(op: ops.CatOp, ins, outs, shapes, bound) -> bool:
    axis = op.axis % len(shapes[0])
    if not any(axis in _axes(a) for a in ins):
        return True
    return all(axis not in _axes(a) and isinstance(s[axis], int) for a, s in zip(ins[:-1], shapes[:-1])) and \
        axis in _axes(outs[0])


@rule(ops.SpatialIndexOp)
def _index(op: ops.SpatialIndexOp, ins, outs, shapes, bound) -> bool:
    padded, counter = _axes(ins[0]), step_of(bound)
    return all(item.op == "slice" and item.args[0].is_const and bound in item.args[1].free_symbols()
               or item.op == "sym" and item.name == counter.name for k, item in enumerate(op.items) if k in padded)


@rule(ops.TakeOp)
def _take(op: ops.TakeOp, ins, outs, shapes, bound) -> bool:
    return not ins[1] and op.axis % len(shapes[0]) not in _axes(ins[0])


@rule(ops.ReshapeOp)
def _reshape(op: ops.ReshapeOp, ins, outs, shapes, bound) -> bool:
    if not ins[0] and not outs[0]:
        return True
    if len(ins[0]) != 1 or len(outs[0]) != 1 or ins[0][0][1] != outs[0][0][1]:
        return False
    before = _product(shapes[0][:ins[0][0][0]])
    after = _product(op.shape[:outs[0][0][0]])
    return isinstance(before, int) and before == after or \
        not isinstance(before, int) and not isinstance(after, int) and simplify(before - after).is_const and \
        simplify(before - after).value == 0


def _axes(padded: Axes) -> set[int]:
    return {a for a, _ in padded}


def _product(sizes):
    out = 1
    for s in sizes:
        out = out * s
    return out


ROW_LOCAL = (ops.ElementwiseOp, ops.CastOp, ops.IdentOp, ops.MergeOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp,
             ops.UnsqueezeOp, ops.SpatialIndexOp, ops.CatOp, ops.ReshapeOp)  # a padded row's value stays in padded rows
ZERO_KEEPING = (ops.CastOp, ops.IdentOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp, ops.UnsqueezeOp, ops.ReshapeOp)
ZERO_FNS = frozenset({"neg", "abs", "sin", "tanh", "relu", "sign", "floor", "ceil", "sqrt", "add", "sub", "mul",
                      "maximum", "minimum", "where", "lt", "gt", "ne", "and", "or"})  # f(0, ..., 0) == 0


def keeps_zeros(op: ops.Op, ins: "list[Axes]", out: Axes) -> bool:
    """Whether ``op`` computes zeros past the end from inputs that hold zeros there: a cast, a copy, a
    permutation, an expansion, a squeeze or an accepted reshape (each moves rows, never mixes them), or
    an elementwise function of :data:`ZERO_FNS`, where every input holds the output's padded axes (none
    is broadcast along one)."""
    if not out or not (isinstance(op, ZERO_KEEPING) or isinstance(op, ops.ElementwiseOp) and op.fn in ZERO_FNS):
        return False
    return all(sorted(c for _, c in axes) == sorted(c for _, c in out) for axes in ins)


def masked_steps(op: ops.Op, ins: "list[Axes]", outs: "list[list[Axes]]") -> set[int]:
    """The ops of a statement (a fused island's steps, else the op itself: 0) whose outputs are masked past
    the end, given its inputs' and its ops' outputs' padded axes (:func:`island_axes`) and inputs that
    hold zeros past the end: those an op that is not :data:`ROW_LOCAL` reads (a sum, a scan, a product: it
    would mix a padded row's value into the rows before the end) and those the statement outputs, but an
    op that keeps those zeros by itself (:func:`keeps_zeros`, from inputs that hold them). The others'
    padded rows hold what row-local ops compute from zeros, which only padded rows of their readers see;
    every output of the statement holds zeros past the end."""
    if isinstance(op, ops.FusedOp):
        steps, wanted = op.steps, {j for j, _ in op.outputs}
    else:
        steps, wanted = (ops.FusedStep(op, tuple((-1, k) for k in range(len(ins))), ()),), {0}
    for step in steps:
        if not isinstance(step.op, ROW_LOCAL):
            wanted |= {j for j, _ in step.inputs if j >= 0}
    zeros, out = [], set()
    for j, step in enumerate(steps):
        axes = [ins[k] if i < 0 else outs[i][k] for i, k in step.inputs]
        held = all(i < 0 or zeros[i] for i, _ in step.inputs)
        kept = held and keeps_zeros(step.op, axes, outs[j][0] if outs[j] else ())
        zeros.append(kept or j in wanted)
        if j in wanted and not kept:
            out.add(j)
    return out


def mean_counts(op: ops.Op, in_shapes: list[tuple], ins: "list[Axes]", outs: "list[list[Axes]]") -> dict:
    """The ops of a statement (a fused island's steps, else the op itself: 0) that are means over padded
    axes, each with the count of the elements it averages (an expression of the bound: the product of
    the reduced axes' sizes), given the statement's input shapes and :func:`island_axes`. A backend runs
    each as a sum of the padded rows divided by that count with the bound at ``T[i]``."""
    if isinstance(op, ops.FusedOp):
        steps = op.steps
    else:
        steps = (ops.FusedStep(op, tuple((-1, k) for k in range(len(in_shapes))), ()),)
    out = {}
    for j, step in enumerate(steps):
        if not (isinstance(step.op, ops.ReduceOp) and step.op.fn == "mean"):
            continue
        i, k = step.inputs[0]
        shape, axes = (in_shapes[k], ins[k]) if i < 0 else (steps[i].shapes[k], outs[i][k])
        reduced = sorted({a % len(shape) for a in step.op.axes})
        if set(reduced) & _axes(axes):
            out[j] = _product([shape[a] for a in reduced])
    return out


def padded_axes(shape: tuple, bound: Expr) -> Axes | None:
    """The axes of ``shape`` whose size is ``bound + c`` (``c`` a constant), each with its ``c``; None
    where a size mentions ``bound`` otherwise."""
    axes = []
    for k, d in enumerate(shape):
        if isinstance(d, int) or bound not in d.free_symbols():
            continue
        offset = simplify(d - bound)
        if not offset.is_const:
            return None
        axes.append((k, int(offset.value)))
    return tuple(axes)


def _mentions(op: ops.Op, bound: Expr, padded: set[int]) -> bool:
    """Whether a field of ``op`` other than its sizes (which :func:`padded_axes` checks) and a spatial
    index's items along ``padded`` axes (its rule's) holds ``bound``."""
    for f in dataclasses.fields(op):
        if f.name in ("shape", "steps", "outputs", "value"):
            continue
        value = getattr(op, f.name)
        values = value if isinstance(value, tuple) else (value,)
        if f.name == "items":
            values = [v for k, v in enumerate(values) if k not in padded]
        if any(isinstance(v, Expr) and bound in v.free_symbols() for v in values):
            return True
    return False


def at_the_end(op: ops.Op) -> bool:
    """Whether ``op`` is a value of symbols (``eval_symbol(B * T)``, a mean's divisor in its gradient) that
    the device computes with ``T`` at ``T[i]``, as the host computes it after the loop."""
    return isinstance(op, ops.EvalSymbolOp) and not op.vectorized


def values_depend(op: ops.Op, bound: Expr) -> bool:
    """Whether an op of a statement (a fused island's steps, else the op itself) computes a value or an
    index from ``bound`` (its sizes aside)."""
    steps = [s.op for s in op.steps] if isinstance(op, ops.FusedOp) else [op]
    return any(_mentions(step, bound, set()) for step in steps)


def island_axes(op: ops.Op, in_shapes: list[tuple], out_shapes: list[tuple], bound: Expr):
    """The padded axes of a statement's inputs and of each of its ops' outputs (one list per op: a fused
    island's steps, else the op itself), where every op keeps its rows before the end (see the module
    docstring); None where one does not."""
    ins = [padded_axes(s, bound) for s in in_shapes]
    if None in ins:
        return None
    if isinstance(op, ops.FusedOp):
        if any(len(s.shapes) != len(s.dtypes) for s in op.steps):
            return None
        steps = [(s.op, s.inputs, s.shapes) for s in op.steps]
    else:
        steps = [(op, tuple((-1, k) for k in range(len(in_shapes))), tuple(out_shapes))]
    outs: list[list[Axes]] = []
    shapes: list[list[tuple]] = []
    for step_op, inputs, step_shapes in steps:
        step_ins = [ins[k] if j < 0 else outs[j][k] for j, k in inputs]
        step_in_shapes = [in_shapes[k] if j < 0 else shapes[j][k] for j, k in inputs]
        axes = [padded_axes(s, bound) for s in step_shapes]
        if None in axes or not at_the_end(step_op) and _mentions(step_op, bound, _axes(step_ins[0]) if step_ins else
                                                                  set()):
            return None
        if any(step_ins) or any(axes):
            fn = RULES.get(type(step_op))
            if fn is None or not fn(step_op, step_ins, axes, step_in_shapes, bound):
                return None
        outs.append(axes)
        shapes.append(list(step_shapes))
    return ins, outs
