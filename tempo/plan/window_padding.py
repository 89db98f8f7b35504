"""Which ops compute the same value from a window padded with zeros past its dim's end.

n-step returns read windows ``r[t:min(t + n, T)]``: ``n`` rows, fewer near the
end of the dim. A device loop reads every window as ``n`` rows, the rows past
the end zeros (:mod:`tempo.plan.device_loops`, source kind ``window``), where
the statement reading it computes the same value from the padded window as
from the short one. That holds per op, by a rule registered here for the op's
type: given the axis of its input that holds the zero padding, the axes of
its outputs that still hold it (an empty dict: the padding's effect is gone,
the op ignores it), or None where the padding changes what the op computes.

- a sum over the padded axis adds zeros, after the window's own rows where
  it adds in index order: the same value (``x + 0 == x``);
- a discounted sum over it adds ``gamma**k * 0``, the same;
- a permutation moves the padding to another axis;
- a mean (it divides by the padded count), a max or a min of a window of
  negative values, and every op without a rule, change what they compute:
  their loop stays on the host.

A fused island ignores the padding where the padding of its input reaches no
output of the island through its steps.
"""
from __future__ import annotations

from typing import Callable

from tempo.ir import ops

Rule = Callable[[ops.Op, int, int], "dict[int, int] | None"]
RULES: dict[type, Rule] = {}


def rule(*types: type):
    """Register the decorated function as the padding rule of ops of ``types``: ``(op, input, axis) ->``
    {output: axis still padded} or None (see the module docstring)."""
    def register(fn: Rule) -> Rule:
        for t in types:
            RULES[t] = fn
        return fn
    return register


@rule(ops.ReduceOp)
def _reduce(op: ops.ReduceOp, k: int, axis: int):
    return {} if op.fn == "sum" and axis in op.axes else None


@rule(ops.DiscountedSumOp)
def _discounted_sum(op: ops.DiscountedSumOp, k: int, axis: int):
    return {} if axis == op.axis else None


@rule(ops.PermuteOp)
def _permute(op: ops.PermuteOp, k: int, axis: int):
    return {0: op.axes.index(axis)}


def ignores_zero_padding(op: ops.Op, k: int, axis: int) -> bool:
    """Whether ``op`` computes the same outputs with its input ``k`` padded with zeros along ``axis``."""
    if not isinstance(op, ops.FusedOp):
        return _padded_outputs(op, k, axis) == {}
    padded = {(-1, k): axis}
    for j, step in enumerate(op.steps):
        for m, src in enumerate(step.inputs):
            if src in padded:
                outs = _padded_outputs(step.op, m, padded[src])
                if outs is None:
                    return False
                padded.update({(j, out): a for out, a in outs.items()})
    return not any(out in padded for out in op.outputs)


def _padded_outputs(op: ops.Op, k: int, axis: int) -> dict[int, int] | None:
    fn = RULES.get(type(op))
    return None if fn is None else fn(op, k, axis)
