"""A counter-based random number generator (SplitMix64 mixing), in NumPy.

Each number is a pure function of ``(stream, point coordinates, element
index)``: no state is carried between calls, so results do not depend on the
order in which points are computed, and a vectorized dim (whose coordinate is
an array) gives the same numbers as looping over its points.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 with good avalanche."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def random_bits(stream: int, coords: Sequence, shape: tuple[int, ...]) -> np.ndarray:
    """uint64 bits shaped ``broadcast(coords) + shape``.

    ``coords`` are ints or integer arrays (broadcast together); the element
    index within ``shape`` is the innermost counter.
    """
    with np.errstate(over="ignore"):
        key = _mix(np.asarray(stream, dtype=np.uint64) + _GOLDEN)
        for c in coords:
            key = _mix(key ^ (np.asarray(c).astype(np.uint64) + _GOLDEN))
        count = int(np.prod(shape, dtype=np.int64))
        counter = np.arange(count, dtype=np.uint64).reshape(shape)
        key = np.asarray(key)[(...,) + (None,) * len(shape)]
        return _mix(key + (counter + np.uint64(1)) * _GOLDEN)


def uniform(stream: int, coords: Sequence, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Uniform numbers on [0, 1)."""
    bits = random_bits(stream, coords, shape)
    if np.dtype(dtype) == np.float64:
        return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return ((bits >> np.uint64(40)).astype(np.float64) * 2.0 ** -24).astype(dtype)


def normal(stream: int, coords: Sequence, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal numbers (Box-Muller on two uniform streams)."""
    u1 = 1.0 - uniform(stream | 1 << 62, coords, shape, "float64")  # in (0, 1]
    u2 = uniform(stream | 1 << 63, coords, shape, "float64")
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(dtype)


DISTRIBUTIONS = {"uniform": uniform, "normal": normal}
