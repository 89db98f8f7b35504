"""Tempo's dtype spellings: names, aliases and NumPy types in; anything else a ShapeError."""
import numpy as np
import pytest

import tempo as tpo
from tempo.ir.dtypes import ALIASES, DTYPES, dtype_name


@pytest.mark.parametrize("name", DTYPES)
def test_names_numpy_dtypes_and_scalar_types_are_the_same_dtype(name):
    assert dtype_name(name) == dtype_name(np.dtype(name)) == dtype_name(np.dtype(name).type) == name


@pytest.mark.parametrize("alias, name", sorted(ALIASES.items()))
def test_aliases(alias, name):
    assert dtype_name(alias) == name
    assert np.dtype(name).name == name  # every alias names a NumPy dtype


def test_python_bool_is_bool():
    assert dtype_name(bool) == "bool"


@pytest.mark.parametrize("given, why", [
    ("float", "ambiguous: use 'float32' or 'float64'"),
    ("int", "ambiguous: use 'int32' or 'int64'"),
    (float, "ambiguous: use 'float32' or 'float64'"),
    (int, "ambiguous: use 'int32' or 'int64'"),
    ("Float32", "unknown dtype 'Float32'"),
    ("bfloat16", "unknown dtype 'bfloat16'"),
    (np.complex64, "dtype complex64 is not one of Tempo's dtypes"),
    (np.dtype("datetime64[s]"), "dtype datetime64[s] is not one of Tempo's dtypes"),
    (None, "unknown dtype None"),
    ([1], "unknown dtype [1]"),
])
def test_everything_else_is_a_shape_error_listing_the_accepted_names(given, why):
    with pytest.raises(tpo.ShapeError) as err:
        dtype_name(given)
    assert why in str(err.value)
    assert "accepted: bool, int8 (i8)" in str(err.value) or "Tempo's dtypes: bool, int8 (i8)" in str(err.value)
