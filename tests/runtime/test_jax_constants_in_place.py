"""The JAX backend's constants on a CPU held in host memory in place (``device_constant``): a large
constant's device array is its aligned host array itself, or one aligned copy of it, and a constant
read a row per layer (a decoder's ``w[l]``) is read as views of that memory, stacked back into the
constant itself, with NumPy's results."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

from tempo.runtime.backends import jax as jax_backend  # noqa: E402  (after the skip: jax may be absent)

ROW_FLOATS = 1 << 16  # a row of 256 KiB: a constant of 8 rows is over IN_PLACE_FROM


def aligned(shape: tuple, offset: int = 0) -> np.ndarray:
    """A float32 array of ``shape`` that starts ``offset`` bytes past a 64-byte boundary."""
    size = int(np.prod(shape)) * 4
    raw = np.empty(size + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    out = raw[start:start + size].view(np.float32).reshape(shape)
    out[...] = np.arange(out.size, dtype=np.float32).reshape(shape) % 251
    return out


def pointer(x) -> int:
    return x.unsafe_buffer_pointer()


@pytest.fixture
def on_cpu():
    if jax.default_backend() != "cpu":
        pytest.skip("constants are held in place on a CPU only")
    with jax_backend.JaxBackend().running():
        yield


def test_an_aligned_constant_is_used_where_it_lies(on_cpu):
    array = aligned((8, ROW_FLOATS))
    held = jax_backend.device_constant(array)
    assert pointer(held) == array.ctypes.data
    np.testing.assert_array_equal(np.asarray(held), array)


def test_an_unaligned_constant_is_copied_once_into_aligned_memory(on_cpu):
    array = aligned((8, ROW_FLOATS), offset=16)
    held = jax_backend.device_constant(array)
    assert pointer(held) != array.ctypes.data and pointer(held) % jax_backend.ALIGNED == 0
    np.testing.assert_array_equal(np.asarray(held), array)
    assert jax_backend.host_rows(held) is not None            # held in place: its rows are views of it


def test_a_small_constant_is_put_as_it_is():
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    held = jax_backend.device_constant(small)
    np.testing.assert_array_equal(np.asarray(held), small)
    assert jax_backend.host_rows(held) is None                # not held in place: rows by the device


def test_a_constants_rows_are_views_and_all_of_them_stack_into_it(on_cpu):
    whole = jax_backend.device_constant(aligned((8, 2, ROW_FLOATS // 2), offset=16))
    rows = jax_backend.host_rows(whole)
    row_bytes = 2 * (ROW_FLOATS // 2) * 4
    assert [pointer(r) - pointer(whole) for r in rows] == [k * row_bytes for k in range(8)]
    for k, row in enumerate(rows):
        np.testing.assert_array_equal(np.asarray(row), np.asarray(whole)[k])
    backend = jax_backend.JaxBackend()
    assert backend.stack(rows, (8,), "float32") is whole
    for partial in (rows[:7], rows[1:], rows[::-1]):             # not every row in order: a stack of them
        stacked = backend.stack(partial, (len(partial),), "float32")
        assert stacked is not whole
        np.testing.assert_array_equal(np.asarray(stacked), np.stack([np.asarray(r) for r in partial]))


def test_a_non_constant_device_array_is_not_read_in_place(on_cpu):
    computed = jax.numpy.ones((8, ROW_FLOATS), np.float32) * 2
    assert jax_backend.host_rows(computed) is None
    assert jax_backend.constant_of(list(computed)) is None


def decoder(backend: str, weights: np.ndarray, steps: int):
    """``h[l + 1, t] = tanh(h[l, t] @ w[l])`` over layers, ``x[t + 1]`` the last layer's: the loop over
    ``t`` a device loop on JAX, reading the layers' weights a row of the constant per layer."""
    layers, width = weights.shape[:2]
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(weights, dims=(l,))
        x = tpo.placeholder((width,), "float32", dims=(t,))
        x[0] = tpo.from_numpy(np.linspace(-1, 1, width, dtype=np.float32))
        h = tpo.placeholder((width,), "float32", dims=(l, t))
        h[0, t] = x[t]
        y = (h[l, t] @ w[l]).tanh()
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t] * 0.5
        return ctx.compile(fetch=[x], backend=backend).run({"L": layers, "T": steps})[0]


def test_a_loop_reading_a_constant_row_per_layer_matches_numpy(monkeypatch):
    width = 512                                                  # a layer's matrix of 1 MiB: held in place
    weights = (np.random.default_rng(0).standard_normal((3, width, width)) / np.sqrt(width)).astype(np.float32)
    made = []
    row = jax_backend.constant_row
    monkeypatch.setattr(jax_backend, "constant_row", lambda whole, k: made.append(k) or row(whole, k))
    got = decoder("jax", weights, 20)
    np.testing.assert_allclose(got, decoder("numpy", weights, 20), rtol=1e-5, atol=1e-5)
    if jax.default_backend() == "cpu":
        assert sorted(set(made)) == [0, 1, 2]                    # the layers' rows read in place
