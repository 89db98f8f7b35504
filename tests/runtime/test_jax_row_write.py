"""A ``where`` that sets one row of a buffer (masked attention's K/V write, ``rows == t``) is, on
JAX, a ``dynamic_update_slice`` of that row (tempo/runtime/backends/jax_ops.py), with NumPy's values
whether the condition picks one row, none, or several (each row it picks updated)."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.ir import ops
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

CAPACITY = 6


def _island(axis: int):
    eq = ops.FusedStep(ops.ElementwiseOp("eq"), ((-1, 0), (-1, 1)), ("bool",))
    row = ops.FusedStep(ops.UnsqueezeOp(axis), ((-1, 2),), ("float32",))
    where = ops.FusedStep(ops.ElementwiseOp("where"), ((0, 0), (1, 0), (-1, 3)), ("float32",))
    return ops.FusedOp((eq, row, where), ((2, 0),))


def _both(picks: np.ndarray, at, axis: int = 0):
    """The island writing a (3, 4) row into a buffer of CAPACITY rows along ``axis`` (0: rows first; 1:
    between the heads and the head size, the masked-reads pass's layout), on JAX against NumPy: the
    lowered program's text."""
    from tempo.runtime.backends import jax as jax_backend
    from tempo.runtime.backends import numpy as np_backend

    rng = np.random.default_rng(0)
    shape = [3, 4]
    shape.insert(axis, CAPACITY)
    inputs = [picks.reshape([CAPACITY if i == axis else 1 for i in range(3)]), np.asarray(at),
              rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=shape).astype(np.float32)]
    island = _island(axis)
    want = np_backend.KERNELS[ops.FusedOp](island)(inputs, {}, ())
    kernel = jax_backend.Island(island.steps, island.outputs, {})
    with jax_backend.x64(True):
        got = kernel(inputs, {}, ())
        text = next(iter(kernel.compiled.values())).lower(inputs, kernel.consts, {}).as_text()
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    return text


@pytest.mark.parametrize("at", [0, 3, CAPACITY - 1, CAPACITY, -1])
def test_a_row_write_at_t_is_a_dynamic_update_of_that_row(at):
    text = _both(np.arange(CAPACITY), at)                      # rows == t: one row, or none past the end
    assert "dynamic_update_slice" in text


@pytest.mark.parametrize("at", [0, 3, CAPACITY])
def test_a_row_write_along_an_inner_axis_is_a_dynamic_update_of_that_row(at):
    text = _both(np.arange(CAPACITY), at, axis=1)              # a row, another, none past the end
    assert "dynamic_update_slice" in text


def test_a_condition_that_picks_several_rows_writes_each_of_them():
    _both(np.array([0, 2, 2, 5, 2, 1]), 2)
