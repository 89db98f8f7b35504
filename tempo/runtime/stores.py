"""Tensor stores: where the points of a recurrent tensor live at run time.

A point store maps each temporal point to its tensor. Reads are by an index
tuple of ints and slices (an evaluated dependence expression); slices stack
the points they cover into new leading axes.
"""
from __future__ import annotations

import itertools

from tempo.errors import TempoError


class PointStore:
    """A dict from point to tensor; slice reads stack."""

    def __init__(self, name: str, backend, dtype: str, empty_shape):
        self.name, self.backend, self.dtype = name, backend, dtype
        self.empty_shape = empty_shape  # () -> spatial shape, for reads of empty slices
        self.data: dict[tuple, object] = {}

    def write(self, point: tuple, value) -> None:
        self.data[point] = value

    def read(self, index: tuple):
        if not any(isinstance(i, slice) for i in index):
            return self._get(index)
        if len(index) == 1:
            points = [self._get((k,)) for k in range(index[0].start, index[0].stop)]
            if points:
                return self.backend.stack(points, (len(points),), self.dtype)
        ranges = [range(i.start, i.stop) if isinstance(i, slice) else (i,) for i in index]
        sizes = tuple(max(0, i.stop - i.start) for i in index if isinstance(i, slice))
        points = [self._get(p) for p in itertools.product(*ranges)]
        if not points:
            return self.backend.stack([], sizes + tuple(self.empty_shape()), self.dtype)
        return self.backend.stack(points, sizes, self.dtype)

    def _get(self, point: tuple):
        try:
            return self.data[point]
        except KeyError:
            raise TempoError(f"internal error: {self.name} read at {point} before it was computed") from None

    def __contains__(self, point: tuple) -> bool:
        return point in self.data
