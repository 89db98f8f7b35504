"""Symbol values and index starts computed on the device (tempo/runtime/backends/jax_step_values.py).

Traced inside ``jax.jit`` from integer scalars, as a device loop's body computes
them from its counter, the expressions must give, bit for bit, what the host
gives step by step: :func:`~tempo.symbolic.evaluate.compile_expr`'s value and the
starts of the JAX backend's ``_index_form``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import make_slice, seq

jax = pytest.importorskip("jax")
from tempo.runtime.backends import jax as jax_backend  # noqa: E402
from tempo.runtime.backends.jax_step_values import device_expr, index_starts  # noqa: E402
from tests.runtime.test_step_values import COUNTERS, exprs  # noqa: E402


def _traced(fn, points):
    """``fn`` of the env ``{t, i, T}`` traced once and mapped over ``points`` (int64, as in a launch)."""
    with jax_backend.x64(True):
        run = jax.jit(jax.vmap(lambda t, i: fn({"t": t, "i": i, "T": np.int64(20)})))
        ts, is_ = (np.array(c, dtype=np.int64) for c in zip(*points))
        return run(ts, is_)


@settings(max_examples=100, deadline=None)
@given(exprs(), COUNTERS)
def test_an_expression_traced_from_the_counters_is_its_value_at_each(e, points):
    got = _traced(device_expr(e), points)
    one = compile_expr(e)
    assert np.asarray(got).tolist() == [one({"t": a, "i": b, "T": 20}) for a, b in points]


@settings(max_examples=100, deadline=None)
@given(exprs(2), exprs(2), exprs(2), COUNTERS)
def test_index_starts_traced_from_the_counters_are_the_hosts_at_each_step(start, stop, point, points):
    """Where the host finds one dynamic form at every step, the traced starts are its starts."""
    index = seq(make_slice(start, stop), point)
    one = compile_expr(index)
    each = [jax_backend._index_form(one({"t": a, "i": b, "T": 20})) for a, b in points]
    if len({form for form, _ in each}) > 1 or each[0][0][0] != "dynamic":
        return
    got = _traced(lambda env: index_starts(device_expr(index), env, each[0][0]), points)
    assert got.dtype == np.int64 and np.array_equal(np.asarray(got), np.stack([starts for _, starts in each]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["float32", "float64", "float16"]), st.booleans(),
       st.sampled_from([(), (3,), (40, 5)]),  # no element, a small draw (the kernel mixes Python ints), a large one
       st.lists(st.tuples(st.integers(-3, 50), st.integers(-2, 300)), min_size=1, max_size=4),
       st.integers(0, 2 ** 40))
def test_uniform_numbers_drawn_on_the_device_are_the_numpy_kernels_bits(dtype, vectorized, size, points, stream):
    """At each point (negative coordinates and offsets included), the numbers traced from the point are
    those the NumPy kernel draws there, bit for bit."""
    from tempo.ir import ops
    from tempo.runtime.backends import numpy as numpy_backend
    from tempo.runtime.backends.jax_step_values import uniform
    from tempo.symbolic.expr import step_and_bound

    (i_, _), (t_, _), (b_, _) = step_and_bound("i"), step_and_bound("t"), step_and_bound("b")
    dims = (i_, t_, b_) if vectorized else (i_, t_)
    op = ops.RandomOp(shape=size, dtype=dtype, dist="uniform", stream=stream, dims=dims,
                      offsets=(0, 3, -1)[:len(dims)], vectorized=(b_,) if vectorized else ())
    kernel, lead = numpy_backend.KERNELS[ops.RandomOp](op), (4,) if vectorized else ()
    with jax_backend.x64(True):
        draw = jax.jit(lambda i, t: uniform(op, (i, t), lead, size))
        for i, t in points:
            got = np.asarray(draw(np.int64(i), np.int64(t)))
            expected = kernel([], {"B": 4}, (i, t))[0]
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()
