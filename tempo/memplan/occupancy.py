"""An interval/offset index of fast-memory allocations (no dense time x memory grid).

Each allocation is a rectangle: offsets ``[offset, offset + size)`` during the
logical steps ``[start, end]`` (inclusive). Rectangles are filed in fixed-width
time buckets, so a query touches only the allocations live in its time window;
free offsets come from one sweep over those allocations sorted by offset.
"""
from __future__ import annotations

import numpy as np

BUCKET = 32


class OffsetIndex:
    """Allocations in fast memory of ``capacity`` units over ``num_steps`` logical steps."""

    def __init__(self, capacity: int, num_steps: int):
        self.capacity = capacity
        self.num_steps = num_steps
        self.rects: dict[int, tuple[int, int, int, int]] = {}
        self._buckets: list[set[int]] = [set() for _ in range(num_steps // BUCKET + 1)]

    def add(self, key: int, offset: int, size: int, start: int, end: int) -> None:
        """Record allocation ``key``; the caller guarantees it is free (see :meth:`fits`)."""
        self.rects[key] = (offset, offset + size, start, end)
        for b in range(start // BUCKET, end // BUCKET + 1):
            self._buckets[b].add(key)

    def remove(self, key: int) -> None:
        """Forget allocation ``key``."""
        _, _, start, end = self.rects.pop(key)
        for b in range(start // BUCKET, end // BUCKET + 1):
            self._buckets[b].discard(key)

    def live(self, start: int, end: int) -> list[tuple[int, int, int, int]]:
        """The allocations (offset, offset end, start, end) overlapping steps ``[start, end]``."""
        keys: set[int] = set()
        for b in range(start // BUCKET, end // BUCKET + 1):
            keys |= self._buckets[b]
        rects = self.rects
        return [r for r in (rects[k] for k in keys) if r[2] <= end and r[3] >= start]

    def gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        """Free offset ranges [lo, hi) throughout steps ``[start, end]``, lowest first."""
        gaps, cursor = [], 0
        for lo, hi, _, _ in sorted(self.live(start, end)):
            if lo > cursor:
                gaps.append((cursor, lo))
            cursor = max(cursor, hi)
        if cursor < self.capacity:
            gaps.append((cursor, self.capacity))
        return gaps

    def lowest_fit(self, size: int, start: int, end: int) -> int | None:
        """The lowest offset free for ``size`` units throughout ``[start, end]``, or None."""
        for lo, hi in self.gaps(start, end):
            if hi - lo >= size:
                return lo
        return None

    def best_fit(self, size: int, start: int, end: int) -> int | None:
        """The start of the smallest free range that holds ``size`` units, or None."""
        fitting = [(hi - lo, lo) for lo, hi in self.gaps(start, end) if hi - lo >= size]
        return min(fitting)[1] if fitting else None

    def fits(self, offset: int, size: int, start: int, end: int, shared=frozenset()) -> bool:
        """Whether ``[offset, offset + size)`` is free throughout ``[start, end]``.

        Allocations whose keys are in ``shared`` (the same alias group: the same
        memory) do not count as taking space.
        """
        if offset < 0 or offset + size > self.capacity:
            return False
        top = offset + size
        keys: set[int] = set()
        for b in range(start // BUCKET, end // BUCKET + 1):
            keys |= self._buckets[b]
        rects = self.rects
        return all(hi <= offset or lo >= top or s > end or e < start
                   for lo, hi, s, e in (rects[k] for k in keys - shared))

    def profile(self, time: int, bins: int) -> np.ndarray:
        """Occupied fraction of each of ``bins`` equal offset ranges at step ``time``."""
        out = np.zeros(bins, np.float32)
        scale = bins / self.capacity
        for lo, hi, _, _ in self.live(time, time):
            _paint(out, lo * scale, hi * scale)
        return out

    def image(self, start: int, end: int, rows: int, cols: int) -> np.ndarray:
        """A ``rows x cols`` binary picture of steps ``[start, end]`` (columns) x offsets (rows)."""
        img = np.zeros((rows, cols), np.float32)
        tscale = cols / (end - start + 1)
        oscale = rows / self.capacity
        for lo, hi, s, e in self.live(start, end):
            c0 = int((max(s, start) - start) * tscale)
            c1 = max(c0 + 1, int(np.ceil((min(e, end) - start + 1) * tscale)))
            r0 = int(lo * oscale)
            r1 = max(r0 + 1, int(np.ceil(hi * oscale)))
            img[r0:r1, c0:c1] = 1.0
        return img


def _paint(out: np.ndarray, lo: float, hi: float) -> None:
    """Add the covered fraction of [lo, hi) to each unit bin of ``out``."""
    first, last = int(lo), min(int(np.ceil(hi)), len(out))
    for i in range(first, last):
        out[i] += min(hi, i + 1) - max(lo, i)
