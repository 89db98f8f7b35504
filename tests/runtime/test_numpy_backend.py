"""NumPy backend kernels against plain NumPy."""
import numpy as np
import pytest

from tempo.runtime.backends.numpy import _matmul

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("a_shape, b_shape", [((5, 7, 3), (3, 4)), ((2, 5, 7, 3), (3, 4)), ((7, 3), (3, 4)),
                                              ((5, 7, 3), (5, 3, 4)), ((3,), (3, 4)), ((5, 7, 3), (3,))])
def test_matmul_matches_numpy(a_shape, b_shape):
    a, b = RNG.normal(size=a_shape), RNG.normal(size=b_shape)
    np.testing.assert_allclose(_matmul(a, b), np.matmul(a, b), rtol=1e-12)
    np.testing.assert_allclose(_matmul(np.asfortranarray(a), np.asfortranarray(b)), np.matmul(a, b), rtol=1e-12)
