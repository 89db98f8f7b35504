"""The NumPy kernels of sums and products in step order: NumPy's values up to rounding, the
same bits with or without trailing steps that hold 0 (or -0, or, for a product's rows, anything)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.runtime.backends.numpy_ordered import (ordered_batch_contract, ordered_discounted_sum, ordered_matmul,
                                                  ordered_mean, ordered_sum)

KERNELS = dict(deadline=None, max_examples=40)
shapes = st.tuples(st.integers(0, 90), st.integers(1, 4), st.integers(1, 6), st.integers(0, 2 ** 16))


def padded(x: np.ndarray, axis: int, extra: int, fill: float = 0.0) -> np.ndarray:
    """``x`` with ``extra`` steps of ``fill`` appended along ``axis``."""
    shape = list(x.shape)
    shape[axis] = extra
    return np.concatenate([x, np.full(shape, fill, x.dtype)], axis=axis)


def in_order(x: np.ndarray, axis: int) -> np.ndarray:
    """The Python loop: ``((0 + x[0]) + x[1]) + ...`` along ``axis``."""
    total = np.zeros(np.delete(x.shape, axis), x.dtype)
    for k in range(x.shape[axis]):
        total = total + np.take(x, k, axis=axis)
    return total


def contraction_operands(shape: tuple, k: int, steps_first: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Float32 operands ``a`` (b, steps, k, 1) and ``c`` (b, steps, 1, n) of a contraction over the
    steps (their first two axes swapped with ``steps_first``), and the steps' axis."""
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    a, c = rng.normal(size=(b, steps, k, 1)).astype(np.float32), rng.normal(size=(b, steps, 1, n)).astype(np.float32)
    if steps_first:
        a, c = np.swapaxes(a, 0, 1), np.swapaxes(c, 0, 1)
    return a, c, 0 if steps_first else 1


@settings(**KERNELS)
@given(shapes, st.integers(0, 2), st.integers(0, 200))
def test_a_sum_adds_each_axis_in_order_whatever_zero_steps_follow(shape, axis, extra):
    steps, b, n, seed = shape
    x = np.random.default_rng(seed).normal(size=(b, steps, n)).astype(np.float32)
    x = np.moveaxis(x, 1, axis)  # the steps' axis anywhere, in any layout
    step_axis = axis
    np.testing.assert_array_equal(ordered_sum(x, (step_axis,)), in_order(x, step_axis))
    for fill in (0.0, -0.0):
        longer = padded(x, step_axis, extra, fill)
        for axes in ((step_axis,), tuple(range(3))):
            np.testing.assert_array_equal(ordered_sum(x, axes), ordered_sum(longer, axes))
            np.testing.assert_allclose(ordered_sum(longer, axes), np.sum(x, axis=axes), rtol=1e-4, atol=1e-4)
    if steps:
        np.testing.assert_allclose(ordered_mean(x, (step_axis,)), np.mean(x, axis=step_axis), rtol=1e-5, atol=1e-6)
        assert ordered_mean(x, (step_axis,)).dtype == np.mean(x, axis=step_axis).dtype


@settings(**KERNELS)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.data())
def test_a_sum_over_several_axes_some_of_one_element_adds_each_in_order_from_plus_zero(shape, data):
    values = st.sampled_from([-0.0, 0.0, 1.5, -2.25, 1e-8, 3e7])
    x = np.array(data.draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                 np.float32).reshape(shape)
    axes = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    expected = x
    for axis in sorted(axes):  # the Python loop, one axis after another
        expected = np.expand_dims(in_order(expected, axis), axis)
    out = ordered_sum(x, axes, keepdims=True)
    assert out.dtype == np.float32 and out.tobytes() == expected.tobytes()
    assert ordered_sum(x, axes).tobytes() == np.squeeze(expected, axis=axes).tobytes()


def test_a_sum_is_never_minus_zero_and_keeps_integers_exact():
    np.testing.assert_array_equal(np.signbit(ordered_sum(np.array([-0.0, -0.0]), (0,))), False)
    np.testing.assert_array_equal(np.signbit(ordered_sum(np.array([[-0.0], [0.0]]), (1,))), False)  # one element
    ints = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(ordered_sum(ints, (0,), keepdims=True), ints.sum(0, keepdims=True))


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.floats(0.5, 1.0))
def test_a_discounted_sum_is_the_same_whatever_zero_steps_follow(shape, extra, gamma):
    steps, b, n, seed = shape
    x = np.random.default_rng(seed).normal(size=(b, steps)).astype(np.float32)
    got = ordered_discounted_sum(x, gamma, 1)
    np.testing.assert_array_equal(got, ordered_discounted_sum(padded(x, 1, extra), gamma, 1))
    np.testing.assert_allclose(got, x @ (gamma ** np.arange(steps)).astype(np.float32), rtol=1e-4, atol=1e-4)


@settings(**KERNELS)
@given(shapes, st.integers(0, 200), st.integers(1, 40), st.booleans())
def test_a_contraction_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra, k, steps_first):
    a, c, axis = contraction_operands(shape, k, steps_first)
    got = ordered_batch_contract(a, c, (axis,))
    np.testing.assert_array_equal(got, ordered_batch_contract(padded(a, axis, extra), padded(c, axis, extra), (axis,)))
    np.testing.assert_allclose(got, np.einsum("xykm,xymn->kn", a, c), rtol=1e-4, atol=1e-4)
    both = ordered_batch_contract(a, c, (0, 1))  # two step axes: either may have more steps
    np.testing.assert_array_equal(both, ordered_batch_contract(padded(a, 0, extra), padded(c, 0, extra), (0, 1)))
    np.testing.assert_array_equal(both, ordered_batch_contract(padded(a, 1, extra), padded(c, 1, extra), (0, 1)))


@settings(**KERNELS)
@given(shapes, st.integers(0, 300), st.integers(1, 70))
def test_a_products_rows_are_the_same_whatever_rows_follow(shape, extra, k):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(steps, b, 1, k)).astype(np.float32), rng.normal(size=(k, n)).astype(np.float32)
    got = ordered_matmul(x, w, (0,), False)
    longer = padded(x, 0, extra)
    longer[steps:] = rng.normal(size=longer[steps:].shape)  # rows past the end hold anything
    np.testing.assert_array_equal(got, ordered_matmul(longer, w, (0,), False)[:steps])
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    inner = np.swapaxes(x[:, :, 0, :], 0, 1)  # (b, steps, k): the steps' axis second
    np.testing.assert_array_equal(ordered_matmul(inner, w, (1,), False),
                                  ordered_matmul(padded(inner, 1, extra), w, (1,), False)[:, :steps])
    stacked = rng.normal(size=(b, k, n)).astype(np.float32)  # a product per episode, rows its steps
    np.testing.assert_array_equal(ordered_matmul(inner, stacked, (1,), False),
                                  ordered_matmul(padded(inner, 1, extra), stacked, (1,), False)[:, :steps])
    np.testing.assert_allclose(ordered_matmul(inner, stacked, (1,), False), inner @ stacked, rtol=1e-4, atol=1e-4)


@settings(**KERNELS)
@given(shapes, st.integers(0, 300))
def test_a_product_over_steps_is_the_same_whatever_zero_steps_follow(shape, extra):
    steps, b, n, seed = shape
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(b, 3, steps)).astype(np.float32), rng.normal(size=(steps, n)).astype(np.float32)
    got = ordered_matmul(x, y, (), True)
    np.testing.assert_array_equal(got, ordered_matmul(padded(x, 2, extra), padded(y, 0, extra), (), True))
    np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-4)
    v = x[0, 0]
    np.testing.assert_array_equal(ordered_matmul(v, y, (), True), ordered_matmul(padded(v, 0, extra), padded(y, 0, extra), (), True))
    np.testing.assert_allclose(ordered_matmul(v, y[:, 0], (), True), v @ y[:, 0], rtol=1e-4, atol=1e-4)
