"""A launch's per-step host values evaluated over its steps at once (tempo/runtime/step_values.py).

The vectorised evaluation must give, bit for bit, what one evaluation per
step gives (:func:`~tempo.symbolic.evaluate.compile_expr` and the JAX
backend's index forms), and a launch's host evaluations of index forms and
random numbers must not grow with its steps.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.ir import ops
from tempo.runtime.backends import numpy as numpy_backend
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import const, make_slice, max_, min_, seq, step_and_bound, symbol

jax_backend = pytest.importorskip("tempo.runtime.backends.jax")
from tempo.runtime import step_values  # noqa: E402
from tempo.runtime.step_values import Draw, StepValues, index_form, vector_expr  # noqa: E402

t, i, T = symbol("t"), symbol("i"), symbol("T")


@st.composite
def exprs(draw, depth: int = 3):
    """Integer expressions of the counters t, i and the bound T: affine forms, min, max, // and %."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from([t, i, T, const(draw(st.integers(-5, 5)))]))
    a, b = draw(exprs(depth - 1)), draw(exprs(depth - 1))
    op = draw(st.sampled_from(["add", "sub", "mul", "min", "max", "floordiv", "mod"]))
    if op in ("floordiv", "mod"):
        return (a // draw(st.integers(1, 4))) if op == "floordiv" else (a % draw(st.integers(1, 4)))
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * const(draw(st.integers(-3, 3))),
            "min": lambda: min_(a, b), "max": lambda: max_(a, b)}[op]()


COUNTERS = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(exprs(), COUNTERS)
def test_an_expression_over_arrays_of_counters_is_its_value_at_each(e, points):
    ts, is_ = (np.array(c, dtype=np.int64) for c in zip(*points))
    got = np.broadcast_to(vector_expr(e)({"t": ts, "i": is_, "T": 20}), (len(points),))
    one = compile_expr(e)
    assert got.tolist() == [one({"t": a, "i": b, "T": 20}) for a, b in points]


@settings(max_examples=200, deadline=None)
@given(exprs(2), exprs(2), exprs(2), COUNTERS)
def test_an_index_form_over_steps_is_the_form_at_each_step(start, stop, point, points):
    """The form as the JAX backend's ``_index_form`` gives it step by step; None exactly where the
    steps' forms differ."""
    index = seq(make_slice(start, stop), point)
    env = {"t": np.array([a for a, _ in points], dtype=np.int64), "i": np.array([b for _, b in points]), "T": 20}
    got = index_form(vector_expr(index)(env), len(points))
    one = compile_expr(index)
    each = {jax_backend._index_form(one({"t": a, "i": b, "T": 20}))[0] for a, b in points}
    assert got == (each.pop() if len(each) == 1 else None)


@pytest.mark.parametrize("dist, dtype", [("uniform", "float32"), ("normal", "float32"), ("uniform", "float64")])
@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("size", [(3,), (40, 5)])  # a small draw (mixed in Python ints) and a large one
def test_a_launchs_random_numbers_drawn_at_once_are_the_kernels_bits_at_each_step(dist, dtype, vectorized, size):
    (i_, _), (t_, _), (b_, B_) = step_and_bound("i"), step_and_bound("t"), step_and_bound("b")
    dims = (i_, t_, b_) if vectorized else (i_, t_)
    op = ops.RandomOp(shape=size, dtype=dtype, dist=dist, stream=7, dims=dims, offsets=(0, 3, 0)[:len(dims)],
                      vectorized=(b_,) if vectorized else ())
    kernel = numpy_backend.KERNELS[ops.RandomOp](op)
    counters = np.array([(2, t) for t in range(5, 13)], dtype=np.int64)
    env = {"B": 4}
    got = Draw(op).over(env, counters, len(counters))
    for row, point in zip(got, counters):
        expected = kernel([], env, tuple(int(p) for p in point))[0]
        assert row.dtype == expected.dtype and np.array_equal(row, expected)


@pytest.mark.slow
def test_a_device_launchs_host_evaluations_do_not_grow_with_its_steps(monkeypatch):
    """The whole tiled REINFORCE run as device launches at 8 and 16 steps per iteration: as many
    vectorised evaluations at both (one per island step of each loop and launch), each over every
    step of the launch (tests/runtime/test_tiled_device_loops.py checks its values against NumPy's)."""
    from tests.schedule.test_tiled_nesting import reinforce

    calls: list[int] = []
    over = StepValues.over

    def counted(self, env, n):
        calls.append(n)
        return over(self, env, n)

    monkeypatch.setattr(step_values.StepValues, "over", counted)
    per_launch, steps = [], []  # evaluations, and the steps they covered
    for length in (8, 16):
        calls.clear()
        _, program = reinforce(0, 4, length, backend="jax")
        assert "the main loop: the whole run" in str(program.plan)
        per_launch.append(len(calls))
        steps.append(sum(calls))
    assert calls and per_launch[0] == per_launch[1]  # the same evaluations at twice the steps
    assert steps[1] > steps[0]  # each over more steps
