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


def random_bits(stream: int, coords: Sequence, shape: tuple[int, ...]) -> np.ndarray:
    """uint64 bits shaped ``broadcast(coords) + shape``.

    ``coords`` are ints or integer arrays (broadcast together); the element
    index within ``shape`` is the innermost counter.
    """
    key, rest = mix_int((int(stream) + GOLDEN) & _MASK), list(coords)
    while rest and np.ndim(rest[0]) == 0:
        key = mix_int(key ^ ((int(rest.pop(0)) + GOLDEN) & _MASK))
    arrays, count = [np.asarray(c) for c in rest], math.prod(shape)
    with np.errstate(over="ignore"):
        key = np.array(key, dtype=np.uint64)
        for c in arrays:
            key = _mix(key ^ (c.astype(np.uint64) + _GOLDEN))
        counter = np.arange(1, count + 1, dtype=np.uint64).reshape(shape)
        counter *= _GOLDEN
        return _mix(key[(...,) + (None,) * len(shape)] + counter)


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


SMALL = 64  # numbers drawn at most: mixed in Python ints, where a few small NumPy calls cost more than the arithmetic
AHEAD = 64  # points of a small uniform draw's last coordinate drawn at once where a loop walks it in order


class Lattice:
    """The numbers of one random tensor as a function of its point, with its constants worked out once.

    Its coordinates are, in order, the next int of the point (where
    ``axes[k]`` is None) or the index along leading axis ``axes[k]`` (a
    vectorized dim), each plus ``offsets[k]``: the numbers are those
    :func:`uniform` or :func:`normal` give for these coordinates. The stream
    keys folded with the leading axes' indices up to the first point
    coordinate, and the later axes' coordinates, are computed once per
    leading shape; a small draw then costs a few mixes per number in Python
    ints and one array built at the end. A loop that walks the last point
    coordinate in order (an acting step's action sample, at ``t = 0, 1,
    ...``) reads small uniform draws from runs of :data:`AHEAD` points drawn
    as one large draw: the same numbers, at a fifteenth of the cost per point.
    """

    def __init__(self, dist: str, stream: int, dtype: str, axes: Sequence[int | None], offsets: Sequence[int]):
        self.dist, self.stream, self.dtype = dist, stream, np.dtype(dtype)
        self.axes, self.offsets = tuple(axes), tuple(offsets)
        self.streams = (stream,) if dist == "uniform" else (stream | 1 << 62, stream | 1 << 63)
        first = next((k for k, axis in enumerate(self.axes) if axis is None), len(self.axes))
        self.folded, self.rest = first, [(axis, (offset + GOLDEN) & _MASK)
                                         for axis, offset in zip(self.axes[first:], self.offsets[first:])]
        self.split = max((k for k, (axis, _) in enumerate(self.rest) if axis is None), default=0)  # the last one's
        self.head = sum(axis is None for axis, _ in self.rest[:self.split])  # point coordinates before the last one
        self._grids: dict[tuple, tuple] = {}
        self._heads: dict[tuple, tuple] = {}  # (which, lead) -> (head coordinates, keys after them, columns left)
        self._counters: dict[int, list[int]] = {}
        self.last_point = max((k for k, axis in enumerate(self.axes) if axis is None), default=None)
        self._previous: tuple | None = None  # (lead, shape, head, last coordinate) of the last small uniform draw
        self._run: tuple | None = None  # (lead, shape, head, first coordinate, numbers) drawn ahead

    def __call__(self, point: Sequence[int], lead: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
        """The numbers at ``point`` (one int per point coordinate, in order), shaped ``lead + shape``."""
        count = math.prod(shape)
        if math.prod(lead) * count > SMALL:
            return DISTRIBUTIONS[self.dist](self.stream, self._coords(point, lead), shape, self.dtype)
        if self.dist == "uniform":
            if self.last_point is not None:
                ahead = self._ahead(point, lead, tuple(shape))
                if ahead is not None:
                    return ahead
            return self._uniform(self._bits(0, point, lead, count), lead + tuple(shape))
        u1 = 1.0 - self._uniform64(self._bits(0, point, lead, count), lead + tuple(shape))
        u2 = self._uniform64(self._bits(1, point, lead, count), lead + tuple(shape))
        return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(self.dtype)

    def _ahead(self, point: Sequence[int], lead: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray | None:
        """The numbers at ``point`` from a run of :data:`AHEAD` points along its last coordinate, drawn at once
        (as one large draw) when a loop walks that coordinate in order: the call after one at the
        coordinate before it starts a run. None where there is no run to read."""
        head, last = tuple(point[:-1]), int(point[-1])
        run = self._run
        if run is not None and run[0] == lead and run[1] == shape and run[2] == head and 0 <= last - run[3] < AHEAD:
            return run[4][last - run[3]].copy()
        previous, self._previous = self._previous, (lead, shape, head, last)
        if previous != (lead, shape, head, last - 1) and (run is None or run[:4] != (lead, shape, head, last - AHEAD)):
            return None
        coords = self._coords(point, lead)
        coords[self.last_point] = coords[self.last_point] + np.arange(AHEAD).reshape((AHEAD,) + (1,) * len(lead))
        self._run = lead, shape, head, last, uniform(self.stream, coords, shape, self.dtype)
        return self._run[4][0].copy()

    def _coords(self, point: Sequence[int], lead: tuple[int, ...]) -> list:
        rest, coords = iter(point), []
        for axis, offset in zip(self.axes, self.offsets):
            if axis is None:
                coords.append(int(next(rest)) + offset)
            else:
                at = [1] * len(lead)
                at[axis] = lead[axis]
                coords.append(offset + np.arange(lead[axis]).reshape(at))
        return coords

    def _bits(self, which: int, point: Sequence[int], lead: tuple[int, ...], count: int) -> list[int]:
        keys, rest, columns = self._after_head(which, point, lead)
        point = iter(point[self.head:])
        for axis, offset in rest:
            if axis is None:
                c = (int(next(point)) + offset) & _MASK
                keys = [mix_int(k ^ c) for k in keys]
            else:
                keys = [mix_int(k ^ c) for k, c in zip(keys, next(columns))]
        counters = self._counters.get(count) or self._counters.setdefault(
            count, [(n * GOLDEN) & _MASK for n in range(1, count + 1)])
        return [mix_int((k + n) & _MASK) for k in keys for n in counters]

    def _after_head(self, which: int, point: Sequence[int], lead: tuple[int, ...]):
        """The keys mixed with the coordinates before the point's last one (kept while they stay the
        same: a loop over the last dim mixes them once), the axes left to mix, and their columns."""
        head = tuple(point[:self.head])
        found = self._heads.get((which, lead))
        if found is None or found[0] != head:
            keys, columns = self._grid(which, lead)
            coords, column = iter(head), iter(columns)
            for axis, offset in self.rest[:self.split]:
                if axis is None:
                    c = (int(next(coords)) + offset) & _MASK
                    keys = [mix_int(k ^ c) for k in keys]
                else:
                    keys = [mix_int(k ^ c) for k, c in zip(keys, next(column))]
            found = self._heads[(which, lead)] = head, keys, list(column)
        return found[1], self.rest[self.split:], iter(found[2])

    def _grid(self, which: int, lead: tuple[int, ...]) -> tuple[list[int], list[list[int]]]:
        """The keys after the leading axes' coordinates, and the later axes' coordinates plus the golden
        ratio, one per element of ``lead`` (C order)."""
        grid = self._grids.get((which, lead))
        if grid is None:
            index = list(itertools.product(*map(range, lead)))
            keys = [mix_int((self.streams[which] + GOLDEN) & _MASK)] * len(index)
            for axis, offset in zip(self.axes[:self.folded], self.offsets[:self.folded]):
                keys = [mix_int(k ^ ((at[axis] + offset + GOLDEN) & _MASK)) for k, at in zip(keys, index)]
            columns = [[(at[axis] + offset) & _MASK for at in index] for axis, offset in self.rest if axis is not None]
            grid = self._grids[(which, lead)] = keys, columns
        return grid

    def _uniform(self, bits: list[int], shape: tuple[int, ...]) -> np.ndarray:
        if self.dtype == np.float64:
            return self._uniform64(bits, shape)
        if self.dtype == np.float32:  # 24-bit fractions: exact in float32
            return np.array([(b >> 40) * 2.0 ** -24 for b in bits], dtype=np.float32).reshape(shape)
        values = np.array([(b >> 40) * 2.0 ** -24 for b in bits], dtype=np.float64).reshape(shape)
        return values.astype(self.dtype)

    @staticmethod
    def _uniform64(bits: list[int], shape: tuple[int, ...]) -> np.ndarray:
        return np.array([(b >> 11) * 2.0 ** -53 for b in bits], dtype=np.float64).reshape(shape)
