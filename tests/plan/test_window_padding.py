"""Which readers of a window ignore its zero padding (:mod:`tempo.plan.window_padding`): every reader the
rules accept computes, on the NumPy backend, the same value from a window padded with zeros as from the
short window, and the readers they refuse (a mean, a max, a min, a sum along another axis) do not."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tempo.ir import ops
from tempo.plan.window_padding import ignores_zero_padding
from tempo.runtime.backends.numpy import NumPyBackend

ROWS = 5  # the padded window's rows


def reducer(kind: str, axis: int, ordered: bool) -> ops.Op:
    if kind == "discounted":
        return ops.DiscountedSumOp(0.9, axis, ordered)
    return ops.ReduceOp(kind, (axis,), ordered=ordered)


def island(kind: str, permuted: bool, axis: int, ordered: bool) -> ops.FusedOp:
    """A fused reader of a ``(rows, 3)`` window: optionally transposed, then reduced along ``axis`` of what
    it reduces (0 or 1)."""
    steps, src = [], (-1, 0)
    if permuted:
        steps.append(ops.FusedStep(ops.PermuteOp((1, 0)), (src,), ("float32",)))
        src = (0, 0)
    steps.append(ops.FusedStep(reducer(kind, axis, ordered), (src,), ("float32",)))
    return ops.FusedOp(tuple(steps), ((len(steps) - 1, 0),))


def run(op: ops.Op, x: np.ndarray) -> np.ndarray:
    return NumPyBackend().kernel(op)([x], {}, ())[0]


@given(st.sampled_from(["sum", "mean", "max", "min", "discounted"]), st.booleans(), st.integers(0, 1),
       st.booleans(), st.integers(1, ROWS - 1),
       st.lists(st.floats(-4, 4, width=32), min_size=3 * ROWS, max_size=3 * ROWS))
def test_a_reader_the_rules_accept_computes_the_same_from_the_padded_window(kind, permuted, axis, ordered,
                                                                            rows, values):
    """The rules' answer against NumPy: where they accept the reader, the padded window's value equals the
    short window's: bit for bit where the reader adds in step order (``ordered``), else to float32
    rounding (BLAS's order of a product's sums, the unordered discounted sum's, may change with the
    length on some CPUs)."""
    op = island(kind, permuted, axis, ordered)
    window = np.asarray(values, np.float32).reshape(ROWS, 3)[:rows]
    padded = np.concatenate([window, np.zeros((ROWS - rows, 3), np.float32)])
    if ignores_zero_padding(op, 0, 0):
        assert (1 if permuted else 0) == axis and kind in ("sum", "discounted")
        if ordered:
            np.testing.assert_array_equal(run(op, padded), run(op, window))
        else:
            scale = np.abs(window).sum(axis=0) + 1e-30                      # the rows the reader adds
            np.testing.assert_array_less(np.abs(run(op, padded) - run(op, window)), 4e-7 * scale)


def test_the_readers_the_rules_refuse_change_with_the_padding():
    """A mean, a max and a sum along the other axis of ``[[-1, -2]]`` padded to two rows differ from the
    short window's, and the rules refuse them; a sum and a discounted sum along the window's axis, which
    they accept, do not differ."""
    window = np.array([[-1.0, -2.0]], np.float32)
    padded = np.concatenate([window, np.zeros_like(window)])
    for op in (ops.ReduceOp("mean", (0,)), ops.ReduceOp("max", (0,)), ops.ReduceOp("sum", (1,))):
        assert not ignores_zero_padding(op, 0, 0)
        assert run(op, padded).shape != run(op, window).shape or (run(op, padded) != run(op, window)).any()
    for op in (ops.ReduceOp("sum", (0,), ordered=True), ops.DiscountedSumOp(0.5, 0, True)):
        assert ignores_zero_padding(op, 0, 0)
        np.testing.assert_array_equal(run(op, padded), run(op, window))
