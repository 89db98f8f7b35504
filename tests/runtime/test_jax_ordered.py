"""The jnp kernels of sums and products in step order, run under ``jax.jit``: the same bits with or
without trailing steps that hold 0 (or -0, or, for a product's rows, anything); the NumPy ordered
kernels' bits for sums (the same float32 additions in the same order), their values within float32
rounding for means (XLA's CPU division rounds apart from NumPy's at times) and products (XLA's dot,
not NumPy's BLAS)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

from tempo.runtime.backends import jax_ordered, numpy_ordered  # noqa: E402
from tests.runtime.test_numpy_ordered import contraction_operands, padded, shapes  # noqa: E402

KERNELS = dict(deadline=None, max_examples=6)  # each example compiles its kernels
CLOSE = dict(rtol=1e-4, atol=1e-4)


def jitted(fn, *arrays, **static) -> np.ndarray:
    """``fn`` of the arrays under ``jax.jit``, its other arguments static, back as an array."""
    return np.asarray(jax.jit(lambda *xs: fn(*xs, **static))(*arrays))


@settings(**KERNELS)
@given(shapes, st.integers(0, 2), st.integers(0, 200))
def test_a_sum_is_numpys_ordered_sum_whatever_zero_steps_follow(shape, axis, extra):
    steps, b, n, seed = shape
    x = np.moveaxis(np.random.default_rng(seed).normal(size=(b, steps, n)).astype(np.float32), 1, axis)
    for axes in ((axis,), (0, 1, 2)):
        got = jitted(jax_ordered.ordered_sum, x, axes=axes)
        np.testing.assert_array_equal(got, numpy_ordered.ordered_sum(x, axes))
        for fill in (0.0, -0.0):
            np.testing.assert_array_equal(got, jitted(jax_ordered.ordered_sum, padded(x, axis, extra, fill), axes=axes))
    if steps:
        np.testing.assert_allclose(jitted(jax_ordered.ordered_mean, x, axes=(axis,), keepdims=True),
                                   numpy_ordered.ordered_mean(x, (axis,), keepdims=True), rtol=1e-6, atol=1e-7)


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.floats(0.5, 1.0))
def test_a_discounted_sum_is_the_same_whatever_zero_steps_follow(shape, extra, gamma):
    steps, b, n, seed = shape
    x = np.random.default_rng(seed).normal(size=(b, steps)).astype(np.float32)
    got = jitted(jax_ordered.ordered_discounted_sum, x, gamma=gamma, axis=1)
    np.testing.assert_array_equal(got, jitted(jax_ordered.ordered_discounted_sum, padded(x, 1, extra), gamma=gamma, axis=1))
    np.testing.assert_allclose(got, numpy_ordered.ordered_discounted_sum(x, gamma, 1), **CLOSE)


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.integers(1, 40), st.booleans())
def test_a_contraction_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra, k, steps_first):
    a, c, axis = contraction_operands(shape, k, steps_first)
    got = jitted(jax_ordered.ordered_batch_contract, a, c, ordered=(axis,))
    longer = jitted(jax_ordered.ordered_batch_contract, padded(a, axis, extra), padded(c, axis, extra), ordered=(axis,))
    np.testing.assert_array_equal(got, longer)
    np.testing.assert_allclose(got, numpy_ordered.ordered_batch_contract(a, c, (axis,)), **CLOSE)


@settings(**KERNELS)
@given(shapes, st.integers(0, 300), st.integers(1, 70))
def test_a_products_rows_are_the_same_whatever_rows_follow(shape, extra, k):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(steps, b, 1, k)).astype(np.float32), rng.normal(size=(k, n)).astype(np.float32)
    got = jitted(jax_ordered.ordered_matmul, x, w, rows=(0,), inner=False)
    longer = padded(x, 0, extra)
    longer[steps:] = rng.normal(size=longer[steps:].shape)  # rows past the end hold anything
    np.testing.assert_array_equal(got, jitted(jax_ordered.ordered_matmul, longer, w, rows=(0,), inner=False)[:steps])
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(x, w, (0,), False), **CLOSE)
    inner = np.swapaxes(x[:, :, 0, :], 0, 1)  # (b, steps, k): the steps' axis second
    stacked = rng.normal(size=(b, k, n)).astype(np.float32)  # a product per episode, rows its steps
    got = jitted(jax_ordered.ordered_matmul, inner, stacked, rows=(1,), inner=False)
    np.testing.assert_array_equal(
        got, jitted(jax_ordered.ordered_matmul, padded(inner, 1, extra), stacked, rows=(1,), inner=False)[:, :steps])
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(inner, stacked, (1,), False), **CLOSE)


@settings(**KERNELS)
@given(shapes, st.integers(0, 300))
def test_a_product_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(b, 3, steps)).astype(np.float32), rng.normal(size=(steps, n)).astype(np.float32)
    got = jitted(jax_ordered.ordered_matmul, x, y, rows=(), inner=True)
    np.testing.assert_array_equal(got, jitted(jax_ordered.ordered_matmul, padded(x, 2, extra), padded(y, 0, extra),
                                              rows=(), inner=True))
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(x, y, (), True), **CLOSE)


def test_a_contraction_over_steps_gives_the_same_bits_as_one_batched_product_or_in_a_loop():
    steps = jax_ordered.STEPS * jax_ordered.UNROLLED  # the most steps whose products are one batched product
    a, c, axis = contraction_operands((steps, 2, 3, 0), 4, False)
    got = jitted(jax_ordered.ordered_batch_contract, a, c, ordered=(axis,))
    longer = jitted(jax_ordered.ordered_batch_contract, padded(a, axis, 1), padded(c, axis, 1), ordered=(axis,))
    np.testing.assert_array_equal(got, longer)  # one chunk more: its products in a lax.scan
    x, y = np.swapaxes(a[:, :, :, 0], 1, 2), c[0, :, 0, :]  # (b, k, steps) @ (steps, n)
    got = jitted(jax_ordered.ordered_matmul, x, y, rows=(), inner=True)
    np.testing.assert_array_equal(got, jitted(jax_ordered.ordered_matmul, padded(x, 2, 1), padded(y, 0, 1),
                                              rows=(), inner=True))
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(x, y, (), True), **CLOSE)
