"""The torch kernels of sums and products in step order: the same bits with or without trailing
steps that hold 0 (or -0, or, for a product's rows, anything); the NumPy ordered kernels' bits for
sums (the same float32 additions in the same order), their values within float32 rounding for
products (MKL's, not NumPy's BLAS)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from tempo.runtime.backends import numpy_ordered  # noqa: E402
from tempo.runtime.backends.torch_ordered import (ordered_batch_contract, ordered_discounted_sum,  # noqa: E402
                                                  ordered_matmul, ordered_mean, ordered_sum, rows_in_order)
from tests.runtime.test_numpy_ordered import contraction_operands, in_order, padded, shapes  # noqa: E402

KERNELS = dict(deadline=None, max_examples=30)
CLOSE = dict(rtol=1e-4, atol=1e-4)


def on_torch(fn, *arrays, **kwargs) -> np.ndarray:
    """``fn`` of the arrays as torch tensors, back as an array."""
    return fn(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays), **kwargs).numpy()


@settings(**KERNELS)
@given(shapes, st.integers(0, 2), st.integers(0, 200))
def test_a_sum_adds_each_axis_in_order_whatever_zero_steps_follow(shape, axis, extra):
    steps, b, n, seed = shape
    x = np.moveaxis(np.random.default_rng(seed).normal(size=(b, steps, n)).astype(np.float32), 1, axis)
    got = on_torch(ordered_sum, x, axes=(axis,))
    np.testing.assert_array_equal(got, in_order(x, axis))
    np.testing.assert_array_equal(got, numpy_ordered.ordered_sum(x, (axis,)))
    rows = np.moveaxis(x, axis, 0).reshape(x.shape[axis], x.size // max(x.shape[axis], 1))  # off the CPU: a call a row
    np.testing.assert_array_equal(on_torch(rows_in_order, rows)[0], numpy_ordered.sum_along(rows, 0)[0])
    for fill in (0.0, -0.0):
        longer = padded(x, axis, extra, fill)
        for axes in ((axis,), (0, 1, 2)):
            np.testing.assert_array_equal(on_torch(ordered_sum, x, axes=axes), on_torch(ordered_sum, longer, axes=axes))
            np.testing.assert_array_equal(on_torch(ordered_sum, longer, axes=axes), numpy_ordered.ordered_sum(x, axes))
    if steps:
        mean = on_torch(ordered_mean, x, axes=(axis,), keepdims=True)
        np.testing.assert_array_equal(mean, numpy_ordered.ordered_mean(x, (axis,), keepdims=True))
        assert mean.dtype == np.float32


def test_a_sum_is_never_minus_zero():
    assert not np.signbit(on_torch(ordered_sum, np.array([-0.0, -0.0], np.float32), axes=(0,)))
    assert not np.signbit(on_torch(ordered_sum, np.zeros((0, 2), np.float32), axes=(0,))).any()


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.floats(0.5, 1.0))
def test_a_discounted_sum_is_the_same_whatever_zero_steps_follow(shape, extra, gamma):
    steps, b, n, seed = shape
    x = np.random.default_rng(seed).normal(size=(b, steps)).astype(np.float32)
    got = on_torch(ordered_discounted_sum, x, gamma=gamma, axis=1)
    np.testing.assert_array_equal(got, on_torch(ordered_discounted_sum, padded(x, 1, extra), gamma=gamma, axis=1))
    np.testing.assert_array_equal(got, numpy_ordered.ordered_discounted_sum(x, gamma, 1))


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.integers(1, 40), st.booleans())
def test_a_contraction_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra, k, steps_first):
    a, c, axis = contraction_operands(shape, k, steps_first)
    got = on_torch(ordered_batch_contract, a, c, ordered=(axis,))
    longer = on_torch(ordered_batch_contract, padded(a, axis, extra), padded(c, axis, extra), ordered=(axis,))
    np.testing.assert_array_equal(got, longer)
    np.testing.assert_allclose(got, numpy_ordered.ordered_batch_contract(a, c, (axis,)), **CLOSE)
    both = on_torch(ordered_batch_contract, a, c, ordered=(0, 1))  # two step axes: either may have more steps
    for grown in (0, 1):
        np.testing.assert_array_equal(both, on_torch(ordered_batch_contract, padded(a, grown, extra),
                                                     padded(c, grown, extra), ordered=(0, 1)))


@settings(**KERNELS)
@given(shapes, st.integers(0, 300), st.integers(1, 70))
def test_a_products_rows_are_the_same_whatever_rows_follow(shape, extra, k):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(steps, b, 1, k)).astype(np.float32), rng.normal(size=(k, n)).astype(np.float32)
    got = on_torch(ordered_matmul, x, w, rows=(0,), inner=False)
    longer = padded(x, 0, extra)
    longer[steps:] = rng.normal(size=longer[steps:].shape)  # rows past the end hold anything
    np.testing.assert_array_equal(got, on_torch(ordered_matmul, longer, w, rows=(0,), inner=False)[:steps])
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(x, w, (0,), False), **CLOSE)
    inner = np.swapaxes(x[:, :, 0, :], 0, 1)  # (b, steps, k): the steps' axis second
    np.testing.assert_array_equal(on_torch(ordered_matmul, inner, w, rows=(1,), inner=False),
                                  on_torch(ordered_matmul, padded(inner, 1, extra), w, rows=(1,), inner=False)[:, :steps])
    stacked = rng.normal(size=(b, k, n)).astype(np.float32)  # a product per episode, rows its steps
    got = on_torch(ordered_matmul, inner, stacked, rows=(1,), inner=False)
    np.testing.assert_array_equal(
        got, on_torch(ordered_matmul, padded(inner, 1, extra), stacked, rows=(1,), inner=False)[:, :steps])
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(inner, stacked, (1,), False), **CLOSE)


@settings(**KERNELS)
@given(shapes, st.integers(0, 300))
def test_a_product_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(b, 3, steps)).astype(np.float32), rng.normal(size=(steps, n)).astype(np.float32)
    got = on_torch(ordered_matmul, x, y, rows=(), inner=True)
    np.testing.assert_array_equal(got, on_torch(ordered_matmul, padded(x, 2, extra), padded(y, 0, extra),
                                                rows=(), inner=True))
    np.testing.assert_allclose(got, numpy_ordered.ordered_matmul(x, y, (), True), **CLOSE)
    v = x[0, 0]
    np.testing.assert_array_equal(on_torch(ordered_matmul, v, y, rows=(), inner=True),
                                  on_torch(ordered_matmul, padded(v, 0, extra), padded(y, 0, extra), rows=(), inner=True))
    np.testing.assert_allclose(on_torch(ordered_matmul, v, y[:, 0], rows=(), inner=True),
                               numpy_ordered.ordered_matmul(v, y[:, 0], (), True), **CLOSE)
