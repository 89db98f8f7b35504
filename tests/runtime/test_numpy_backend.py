"""NumPy backend kernels against plain NumPy."""
import numpy as np
import pytest

from tempo.ir import ops
from tempo.runtime.backends.numpy import (FEW, FEW_MATRICES, REDUCERS, REDUCTIONS, SKINNY_FROM, NumPyBackend,
                                          _batch_contract, _matmul, _unsqueeze)

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("a_shape, b_shape", [((5, 7, 3), (3, 4)), ((2, 5, 7, 3), (3, 4)), ((7, 3), (3, 4)),
                                              ((5, 7, 3), (5, 3, 4)), ((3,), (3, 4)), ((5, 7, 3), (3,))])
def test_matmul_matches_numpy(a_shape, b_shape):
    a, b = RNG.normal(size=a_shape), RNG.normal(size=b_shape)
    np.testing.assert_allclose(_matmul(a, b), np.matmul(a, b), rtol=1e-12)
    np.testing.assert_allclose(_matmul(np.asfortranarray(a), np.asfortranarray(b)), np.matmul(a, b), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("a_shape", [(128, 1), (5, 7, 1)])
def test_a_column_times_a_row_is_numpy_s_product_bit_for_bit(dtype, a_shape):
    with np.errstate(all="ignore"):  # overflow and underflow are part of what is compared
        special = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30, 3e38, -3e38, np.inf, -np.inf, np.nan, 1.0], dtype)
        a = (RNG.normal(size=a_shape) * 10.0 ** RNG.integers(-30, 30, size=a_shape)).astype(dtype)
        b = RNG.normal(size=(1, 64)).astype(dtype)
        a.reshape(-1)[RNG.integers(0, a.size, 12)] = special
        b[0, RNG.integers(0, 64, 12)] = special
        got, want = _matmul(a, b), np.matmul(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()  # the same bits: -0 against +0, NaN payloads, underflow to zero


@pytest.mark.parametrize("rows, columns", [(1, 64), (3, 64), (FEW, 96), (FEW + 1, 64)])
@pytest.mark.parametrize("few", ["rows", "columns"])
def test_a_stacked_product_with_few_rows_or_columns_matches_numpy(rows, columns, few):
    """Attention's decoding-step products, (3 x S) @ (S x 64) and (S x 64) @ (64 x 3), long enough
    to run as matrix-vector products, on views of a larger buffer as a block store holds them."""
    long, stack = SKINNY_FROM // columns + 5, (2, FEW_MATRICES // 2)
    store = RNG.normal(size=(*stack, long + 7, columns)).astype(np.float32)
    matrices = store[:, :, :long]                                     # (2, 8, long, columns), a strided view
    if few == "rows":
        a, b = RNG.normal(size=(*stack, rows, long)).astype(np.float32), matrices
    else:
        a, b = matrices, RNG.normal(size=(*stack, columns, rows)).astype(np.float32)
    np.testing.assert_allclose(_matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-4)
    assert _matmul(a, b).shape == np.matmul(a, b).shape


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4, 5, 2), (3, 4, 2, 6)), ((2, 5, 1), (2, 1, 3)),
                                              ((3, 4, 6, 1), (3, 4, 1, 7))])
def test_batch_contract_is_the_sum_of_the_batched_products(a_shape, b_shape):
    a, b = RNG.normal(size=a_shape), RNG.normal(size=b_shape)
    want = (a @ b).sum(axis=tuple(range(a.ndim - 2)))
    np.testing.assert_allclose(_batch_contract(a, b), want, rtol=1e-12)
    np.testing.assert_allclose(_batch_contract(np.asfortranarray(a), np.asfortranarray(b)), want, rtol=1e-12)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4)])
def test_unsqueeze_is_expand_dims_at_every_axis(shape):
    x = RNG.normal(size=shape)
    for axis in range(-len(shape) - 1, len(shape) + 1):
        got = _unsqueeze(x, axis)
        assert got.shape == np.expand_dims(x, axis).shape
        np.testing.assert_array_equal(got, np.expand_dims(x, axis))
    for axis in (len(shape) + 1, -len(shape) - 2):
        with pytest.raises(np.exceptions.AxisError):
            _unsqueeze(x, axis)


ARRAYS = [RNG.normal(size=(3, 4)).astype(np.float32), RNG.normal(size=(2, 3, 5)).astype(np.float16),
          RNG.integers(-9, 9, size=(4, 3)).astype(np.int32), RNG.normal(size=(3, 4)) > 0]


@pytest.mark.parametrize("fn", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("x, axes, keepdims", [(x, axes, keep) for x in ARRAYS
                                               for axes, keep in [((0,), False), ((-1,), True), ((), False)]]
                         + [(np.float32(2.5), (), False)])
def test_a_reduction_kernel_gives_what_numpy_s_function_gives(fn, x, axes, keepdims):
    got, = NumPyBackend().kernel(ops.ReduceOp(fn, axes, keepdims))([x], {}, ())
    want = REDUCERS[fn](x, axis=axes, keepdims=keepdims)
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x", ARRAYS[:3] + [np.array(0.5, np.float32), np.float64(-3.0), 2.0, np.array(-100.0)])
def test_the_sigmoid_kernel_is_one_over_one_plus_exp_minus_x(x):
    """Written over one buffer for a float array: the same values, dtype and shape, the input untouched."""
    before = np.array(x, copy=True)
    with np.errstate(over="ignore"):
        got, = NumPyBackend().kernel(ops.ElementwiseOp("sigmoid"))([x], {}, ())
        want = 1.0 / (1.0 + np.exp(-x))
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("axis, keepdims", [((-1,), True), ((0,), False), ((0, 2), True), ((0, 1, 2), False),
                                            (1, False)])
def test_the_mean_is_numpy_s_bit_for_bit(dtype, axis, keepdims):
    x = (RNG.normal(size=(3, 5, 7)) * 100).astype(dtype)
    got, want = REDUCTIONS["mean"](x, axis=axis, keepdims=keepdims), np.mean(x, axis=axis, keepdims=keepdims)
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
