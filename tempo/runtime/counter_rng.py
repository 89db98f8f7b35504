"""A counter-based random number generator (SplitMix64 mixing), in NumPy.

Each number is a pure function of ``(stream, point coordinates, element
index)``: no state is carried between calls, so results do not depend on the
order in which points are computed, and a vectorized dim (whose coordinate is
an array) gives the same numbers as looping over its points.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK = (1 << 64) - 1
_GOLDEN, _M1, _M2 = np.uint64(GOLDEN), np.uint64(M1), np.uint64(M2)
_S30, _S27, _S31, _ONE = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(1)


def mix_int(x: int) -> int:
    """SplitMix64's finaliser on a Python int in ``[0, 2**64)``: a bijection with good avalanche."""
    x = ((x ^ (x >> 30)) * M1) & _MASK
    x = ((x ^ (x >> 27)) * M2) & _MASK
    return x ^ (x >> 31)


def _mix(x: np.ndarray) -> np.ndarray:
    """:func:`mix_int` on a uint64 array (a fresh one: it is updated in place)."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


SMALL = 64  # numbers drawn at most: mixed in Python ints, where a few small NumPy calls cost more than the arithmetic


def random_bits(stream: int, coords: Sequence, shape: tuple[int, ...]) -> np.ndarray:
    """uint64 bits shaped ``broadcast(coords) + shape``.

    ``coords`` are ints or integer arrays (broadcast together); the element
    index within ``shape`` is the innermost counter.
    """
    key, rest = mix_int((int(stream) + GOLDEN) & _MASK), list(coords)
    while rest and np.ndim(rest[0]) == 0:
        key = mix_int(key ^ ((int(rest.pop(0)) + GOLDEN) & _MASK))
    arrays = [np.asarray(c) for c in rest]
    lead = arrays[0].shape if len(arrays) == 1 else np.broadcast_shapes(*(a.shape for a in arrays))
    count = math.prod(shape)
    if math.prod(lead) * count <= SMALL:
        return _small_bits(key, arrays, lead, shape, count)
    with np.errstate(over="ignore"):
        key = np.array(key, dtype=np.uint64)
        for c in arrays:
            key = _mix(key ^ (c.astype(np.uint64) + _GOLDEN))
        counter = np.arange(1, count + 1, dtype=np.uint64).reshape(shape)
        counter *= _GOLDEN
        return _mix(key[(...,) + (None,) * len(shape)] + counter)


def _small_bits(key: int, arrays: list, lead: tuple, shape: tuple, count: int) -> np.ndarray:
    columns = [itertools.repeat(int(a)) if a.ndim == 0 else (a if a.shape == lead else np.broadcast_to(a, lead))
               .ravel().tolist() for a in arrays]
    out = []
    for coords in itertools.islice(zip(*columns), math.prod(lead)) if columns else [()]:
        k = key
        for c in coords:
            k = mix_int(k ^ ((c + GOLDEN) & _MASK))
        out += [mix_int((k + n * GOLDEN) & _MASK) for n in range(1, count + 1)]
    return np.array(out, dtype=np.uint64).reshape(lead + tuple(shape))


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
