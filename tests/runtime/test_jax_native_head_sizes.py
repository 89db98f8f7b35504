"""The JAX backend's stacked products over a masked K/V buffer at head sizes other than 64: the scores
kernel holds a product's columns in registers up to 64 floats a row and reads longer rows row by row,
every product of a run of rows kept in one call; the masked rows are ``fill`` in the product."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tempo.runtime.backends import jax_native
from tempo.runtime.backends.jax_layout import Permuted


@pytest.fixture
def native():
    if not jax_native.available():
        pytest.skip(jax_native.unavailable())


@pytest.mark.parametrize("size", [16, 48, 128])
@pytest.mark.parametrize("kept", ["prefix", "runs", "none"])
@pytest.mark.parametrize("fill", [0.0, 2.0])
def test_scores_and_mixed_values_at_other_head_sizes(native, size, kept, fill):
    rng = np.random.default_rng(size)
    positions, batch, heads, groups = 400, 3, 2, 3
    buffer = rng.standard_normal((positions, batch, heads, size)).astype(np.float32)
    q = rng.standard_normal((batch, heads, groups, size)).astype(np.float32)
    weights = rng.random((batch, heads, groups, positions)).astype(np.float32)
    rows = {"prefix": np.arange(positions) < 301, "runs": (np.arange(positions) // 7) % 3 != 1,
            "none": np.zeros(positions, bool)}[kept]
    buffer[~rows] = np.nan                                       # never read
    logical = np.where(rows[:, None], np.transpose(np.nan_to_num(buffer), (1, 2, 0, 3)), np.float32(fill))

    def products(buffer, q, weights, rows):
        kv = jax_native.RowMasked(Permuted(buffer, (1, 2, 0, 3)), rows, 2, jnp.float32(fill))
        return (jax_native.stacked_product(kv, Permuted(q, (0, 1, 3, 2))),
                jax_native.stacked_product(weights, kv) if size % 16 == 0 and size <= 64 else None)

    scores, mixed = jax.jit(products)(buffer, q, weights, rows)
    expected = logical.astype(np.float64) @ np.swapaxes(q, -1, -2).astype(np.float64)
    np.testing.assert_allclose(np.asarray(scores), expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    if mixed is not None:
        expected = weights.astype(np.float64) @ logical.astype(np.float64)
        np.testing.assert_allclose(np.asarray(mixed), expected, rtol=0, atol=1e-4 * np.abs(expected).max())
