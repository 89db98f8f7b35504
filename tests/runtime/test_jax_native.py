"""The JAX backend's native products (``tempo.runtime.backends.jax_native``: XLA FFI calls into the
skinny product kernels) against NumPy's, inside compiled programs, and the backend packing weights for them."""
from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tempo as tpo
from tempo.ir import ops
from tempo.runtime.backends import jax_native, skinny_products
from tests.transforms.simplification import ops_of


@pytest.fixture
def native():
    if not jax_native.available():
        pytest.skip(jax_native.unavailable())


def test_the_handlers_build_wherever_the_skinny_kernels_do():
    # the handlers include the skinny kernels' source: a change of theirs that the handlers' calls do not
    # follow must fail here, not fall back to XLA's dot unseen
    if skinny_products.KERNELS.library() is None or not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no skinny kernels or no C++ compiler here")
    assert jax_native.available(), jax_native.unavailable()


def close(out, a, b):
    """Within float32 rounding of a sum of ``k`` products (the kernel sums in another order than XLA)."""
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = np.asarray(out)
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * np.sqrt(b.shape[-2]) * np.abs(expected).max())


def rows_and_panels(lead, m, k, count, width):
    rng = np.random.default_rng(m * 100 + width)
    return (rng.standard_normal((*lead, 1, m, k)).astype(np.float32),
            rng.standard_normal((count, k, width)).astype(np.float32))


@pytest.mark.parametrize("m", [1, 3, 4, 5, 32])
@pytest.mark.parametrize("width", [16, 32, 64])
@pytest.mark.parametrize("lead", [(), (1, 1)])
def test_the_panel_product_is_the_product_in_a_compiled_program(native, m, width, lead):
    a, b = rows_and_panels(lead, m, 37, 5, width)
    close(jax.jit(jax_native.panel_product)(a, b), a, b)


def test_the_panel_product_runs_at_every_step_of_a_scan(native):
    a, b = rows_and_panels((), 2, 40, 3, 32)

    def step(x, _):
        y = jax_native.panel_product(x, b)                         # (3, 2, 32) -> the next step's (1, 2, 40)
        return jnp.tanh(jnp.moveaxis(y, 0, 1).reshape(1, 2, 96)[..., :40]), y

    _, ys = jax.jit(lambda x: jax.lax.scan(step, x, None, length=4))(a)
    x = a
    for y in np.asarray(ys):
        close(y, x, b)
        x = np.tanh(np.moveaxis(y, 0, 1).reshape(1, 2, 96)[..., :40])


@pytest.mark.parametrize("a_shape, b_shape, dtype", [
    ((3, 2, 8), (3, 8, 16), np.float32),        # no unit axis before the rows
    ((2, 1, 2, 8), (3, 8, 16), np.float32),     # a leading axis over 1
    ((1, 33, 8), (3, 8, 16), np.float32),       # more rows than the kernel's
    ((1, 2, 8), (3, 8, 24), np.float32),        # panels not a multiple of 16 wide
    ((1, 2, 8), (3, 8, 16), np.float64),
    ((2, 8), (8, 16), np.float32),              # a matrix, not panels
])
def test_the_panel_product_declines_what_the_kernel_does_not_take(a_shape, b_shape, dtype):
    assert jax_native.panel_product(np.ones(a_shape, dtype), np.ones(b_shape, dtype)) is None


def test_a_decoding_like_program_on_jax_packs_its_weights_and_matches_numpy(native):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1, 48)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) / 7 for s in ((48, 96), (96, 64)))
    outs = {}
    for backend in ("numpy", "jax"):
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            h = tpo.from_numpy(x, dims=(t,))[t] @ tpo.from_numpy(w1)
            y = (h * (h > 0)) @ tpo.from_numpy(w2)
            program = ctx.compile([y], backend=backend, passes={"vectorize": False})   # a product per step
            outs[backend] = np.asarray(program.run({T: 6})[0])
            assert sum(len(n.shapes[0]) == 3 for n in ops_of(program, ops.ConstOp)) == 2   # both as panels
    np.testing.assert_allclose(outs["jax"], outs["numpy"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs["numpy"], np.maximum(x @ w1, 0) @ w2, rtol=1e-4, atol=1e-5)


def buffer_and_queries(positions, batch, heads, size, groups, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((positions, batch, heads, size)).astype(np.float32),
            rng.standard_normal((batch, heads, groups, size)).astype(np.float32))


@pytest.mark.parametrize("batch, heads, groups", [(1, 3, 3), (2, 3, 1), (4, 2, 4), (1, 1, 2)])
def test_stacked_products_read_a_kv_buffer_where_it_lies(native, batch, heads, groups):
    """``keys @ q^T`` and ``weights @ values`` with keys and values (batch, heads, S, hd) the buffer
    (S, batch, heads, hd) permuted, not copied: the kernels read each head's rows strided."""
    from tempo.runtime.backends.jax_layout import Permuted

    buffer, q = buffer_and_queries(300, batch, heads, 64, groups)
    weights = np.random.default_rng(1).random((batch, heads, groups, 300)).astype(np.float32)
    logical = np.transpose(buffer, (1, 2, 0, 3))

    def scores_and_mixed(buffer, q, weights):
        kv = Permuted(buffer, (1, 2, 0, 3))
        return (jax_native.stacked_product(kv, Permuted(q, (0, 1, 3, 2))),
                jax_native.stacked_product(weights, kv))

    scores, mixed = jax.jit(scores_and_mixed)(buffer, q, weights)
    close(scores, logical, np.swapaxes(q, -1, -2))
    close(mixed, weights, logical)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 5, 64, 64), (2, 5, 64, 64)),      # neither side few
    ((3, 4, 100), (3, 100, 24)),           # columns not a multiple of 16
    ((3, 300, 40), (3, 40, 2)),            # inner size not a multiple of 16
    ((3, 2, 10), (3, 10, 16)),             # too small to be worth a call
    ((2, 64), (64, 16)),                   # not a stack
])
def test_stacked_products_decline_what_the_kernels_do_not_take(a_shape, b_shape):
    assert jax_native.stacked_product(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)) is None


def test_unevenly_spaced_heads_are_declined():
    from tempo.runtime.backends.jax_layout import Permuted

    buffer = np.ones((3, 300, 2, 64), np.float32)         # heads (3, 2) permuted to (2, 3): not one stride
    assert jax_native.stacked_product(Permuted(buffer, (2, 0, 1, 3)), np.ones((2, 3, 64, 2), np.float32)) is None


@pytest.mark.parametrize("kept", ["prefix", "scattered", "none", "all"])
@pytest.mark.parametrize("batch, heads, groups", [(1, 3, 3), (2, 2, 1)])
@pytest.mark.parametrize("fill", [0.0, -1.5])
def test_stacked_products_of_a_masked_buffer_read_the_rows_kept(native, kept, batch, heads, groups, fill):
    """``where(rows, keys, fill) @ q^T`` and ``weights @ where(rows, values, fill)`` with the mask along
    the buffer's positions: the masked rows are ``fill`` in the product, whatever the buffer holds there
    (here infinities and NaNs, which a read of them would spread)."""
    from tempo.runtime.backends.jax_layout import Permuted

    buffer, q = buffer_and_queries(300, batch, heads, 64, groups)
    rows = {"prefix": np.arange(300) < 137, "scattered": np.random.default_rng(2).random(300) < 0.4,
            "none": np.zeros(300, bool), "all": np.ones(300, bool)}[kept]
    buffer[~rows] = np.where(np.arange(64) % 2, np.inf, np.nan).astype(np.float32)
    weights = np.random.default_rng(1).random((batch, heads, groups, 300)).astype(np.float32)
    logical = np.where(rows[:, None], np.transpose(np.nan_to_num(buffer), (1, 2, 0, 3)), np.float32(fill))

    def scores_and_mixed(buffer, q, weights, rows):
        kv = jax_native.RowMasked(Permuted(buffer, (1, 2, 0, 3)), rows, 2, jnp.float32(fill))
        return (jax_native.stacked_product(kv, Permuted(q, (0, 1, 3, 2))),
                jax_native.stacked_product(weights, kv))

    scores, mixed = jax.jit(scores_and_mixed)(buffer, q, weights, rows)
    close(scores, logical, np.swapaxes(q, -1, -2))
    close(mixed, weights, logical)


def test_a_mask_along_another_axis_is_computed_not_skipped(native):
    from tempo.runtime.backends.jax_layout import Permuted

    buffer, q = buffer_and_queries(300, 1, 3, 64, 2)
    along_heads = jax_native.RowMasked(Permuted(buffer, (1, 2, 0, 3)), np.array([True, False, True]), 1)
    assert jax_native.stacked_product(along_heads, np.ones((1, 3, 64, 2), np.float32)) is None
    np.testing.assert_array_equal(np.asarray(along_heads.dense())[0, 1], 0)
