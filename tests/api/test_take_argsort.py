"""``argsort`` (stable) and ``take`` (a gather along one axis): programs against NumPy on every backend."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.api import functional as F
from tempo.runtime.backends import base

BACKENDS = ["numpy"] + [b for b in ("torch", "jax") if b in base.available_backends()]
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argsort_is_stable_and_take_gathers_along_an_axis_at_every_point(backend):
    keys = RNG.integers(0, 3, size=(4, 7)).astype(np.float64)  # ties: equal keys keep their order
    table = RNG.normal(size=(4, 7, 3)).astype(np.float32)
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        order = tpo.argsort(tpo.from_numpy(keys, dims=(i,)))
        x = tpo.from_numpy(table, dims=(i,))
        rows = tpo.take(x, order.spatial[2:5], axis=0)  # (3, 3): ranks 2..4
        columns = tpo.take(x, tpo.from_numpy(np.array([2, 2, 0])), axis=1)  # (7, 3): a repeated index
        got_order, got_rows, got_columns = ctx.run({I: 4}, fetch=[order, rows, columns], backend=backend)
    want = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(got_order, want)
    assert got_order.dtype == np.int64
    for k in range(4):
        np.testing.assert_array_equal(got_rows[k], table[k][want[k, 2:5]])
        np.testing.assert_array_equal(got_columns[k], np.take(table[k], [2, 2, 0], axis=1))


def test_take_over_a_batch_dim_reads_each_points_own_tensor():
    table = RNG.normal(size=(3, 5, 2)).astype(np.float32)
    index = np.array([4, 1])
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        x = tpo.from_numpy(table, dims=(b,)) * (tpo.eval_symbol(t).cast("float32") + 1.0)
        got, = ctx.run({B: 3, T: 2}, fetch=[F.take(x, tpo.from_numpy(index), axis=0)])
    want = np.stack([table[:, index] * (t + 1.0) for t in range(2)], axis=1)
    np.testing.assert_array_equal(got, want)


def test_take_needs_one_int_axis_of_indices():
    with tpo.Context():
        x = tpo.from_numpy(np.zeros((3, 2), np.float32))
        with pytest.raises(tpo.ShapeError, match="one int axis"):
            F.take(x, tpo.from_numpy(np.zeros((2, 2), np.int64)))
        with pytest.raises(tpo.ShapeError, match="one int axis"):
            F.take(x, tpo.from_numpy(np.zeros(2, np.float32)))
