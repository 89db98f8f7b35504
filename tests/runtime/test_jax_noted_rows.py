"""A JAX block buffer written row by row (an acting loop's output) notes its rows and writes them in
``NOTED_ROWS`` consecutive rows at a time: however long the block, it holds a bounded number of
separate row arrays (each costs ~2 KiB of host objects whatever its bytes), and its values are the
rows written, in any order and with reads between the writes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")


def _backend():
    from tempo.runtime.backends import jax as jax_backend

    return jax_backend, jax_backend.JaxBackend()


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 300), shuffled=st.booleans(), reads=st.lists(st.integers(0, 299), max_size=3),
       seed=st.integers(0, 2**16))
def test_a_block_written_row_by_row_holds_its_rows_and_few_separate_arrays(length, shuffled, reads, seed):
    jax_backend, backend = _backend()
    rng = np.random.default_rng(seed)
    want = rng.normal(size=(length, 4)).astype(np.float32)
    order = rng.permutation(length) if shuffled else np.arange(length)
    buffer = backend.empty((length, 4), "float32")
    for step, row in enumerate(order):
        buffer = backend.write_into(buffer, int(row), want[row])
        if not shuffled:
            assert len(buffer.pending) < jax_backend.NOTED_ROWS
        if step in reads:  # a read between writes: the rows written so far, the others zero
            done = np.zeros_like(want)
            done[order[:step + 1]] = want[order[:step + 1]]
            np.testing.assert_array_equal(backend.to_numpy(buffer.applied()), done)
    np.testing.assert_array_equal(backend.to_numpy(buffer.applied()), want)
    for row in rng.integers(0, length, size=3):
        np.testing.assert_array_equal(backend.to_numpy(buffer.row(int(row))), want[row])


def test_a_long_block_written_in_order_is_stacked_in_bounded_stacks():
    jax_backend, backend = _backend()
    length = 5 * jax_backend.NOTED_ROWS + 7
    held = []
    with jax_backend.x64(True):
        buffer = backend.empty((length, 2), "int64")
        for row in range(length):
            buffer = backend.write_into(buffer, row, np.array([row, -row]))
            held.append(len(buffer.pending))
        got = backend.to_numpy(buffer.applied())
    assert max(held) == jax_backend.NOTED_ROWS - 1 and held[-1] == 0  # the tail written in with the last row
    np.testing.assert_array_equal(got, np.stack([np.arange(length), -np.arange(length)], 1))
