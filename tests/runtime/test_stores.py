"""Point stores: point reads, slice reads that stack, empty slices."""
import numpy as np
import pytest

from tempo.errors import TempoError
from tempo.runtime.backends import get_backend
from tempo.runtime.stores import PointStore


def _store():
    store = PointStore("x", get_backend("numpy"), "float64", lambda: (2,))
    for i in range(2):
        for t in range(4):
            store.write((i, t), np.array([i, t], dtype=np.float64))
    return store


def test_point_read():
    np.testing.assert_array_equal(_store().read((1, 2)), [1, 2])


def test_slice_reads_stack_in_index_order():
    store = _store()
    assert store.read((0, slice(1, 4))).shape == (3, 2)
    both = store.read((slice(0, 2), slice(0, 4)))
    assert both.shape == (2, 4, 2)
    np.testing.assert_array_equal(both[1, 3], [1, 3])


def test_empty_slice_has_the_spatial_shape():
    assert _store().read((0, slice(3, 3))).shape == (0, 2)


def test_read_before_write_is_an_internal_error():
    with pytest.raises(TempoError, match="before it was computed"):
        _store().read((5, 0))


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(TempoError, match="numpy"):
        get_backend("tensorflow")
