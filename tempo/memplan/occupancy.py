"""An interval/offset index of fast-memory allocations (no dense time x memory grid).

Each allocation is a rectangle: offsets ``[offset, offset + size)`` during the
logical steps ``[start, end]`` (inclusive). Rectangles live in flat NumPy
columns indexed by their key, so a query over any time window is a handful of
vectorised passes over the allocations (no per-step or per-byte grid, and no
Python loop over allocations); free offsets come from one sweep over the live
allocations sorted by offset.
"""
from __future__ import annotations

import numpy as np


class OffsetIndex:
    """Allocations in fast memory of ``capacity`` units over ``num_steps`` logical steps."""

    def __init__(self, capacity: int, num_steps: int, keys: int = 64):
        self.capacity = capacity
        self.num_steps = num_steps
        self.rects: dict[int, tuple[int, int, int, int]] = {}
        self._cols = np.zeros((4, keys), np.int64)     # offset, offset end, start, end
        self._on = np.zeros(keys, bool)

    def add(self, key: int, offset: int, size: int, start: int, end: int) -> None:
        """Record allocation ``key``; the caller guarantees it is free (see :meth:`fits`)."""
        if key >= self._on.size:
            grow = max(2 * self._on.size, key + 1)
            self._cols = np.pad(self._cols, ((0, 0), (0, grow - self._on.size)))
            self._on = np.pad(self._on, (0, grow - self._on.size))
        self.rects[key] = (offset, offset + size, start, end)
        self._cols[:, key] = self.rects[key]
        self._on[key] = True

    def remove(self, key: int) -> None:
        """Forget allocation ``key``."""
        del self.rects[key]
        self._on[key] = False

    def _live_mask(self, start: int, end: int) -> np.ndarray:
        return self._on & (self._cols[2] <= end) & (self._cols[3] >= start)

    def live(self, start: int, end: int) -> np.ndarray:
        """The allocations overlapping steps ``[start, end]``: rows (offset, offset end, start, end)."""
        return self._cols[:, self._live_mask(start, end)].T

    def gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        """Free offset ranges [lo, hi) throughout steps ``[start, end]``, lowest first."""
        lo, hi = self._cols[:2, self._live_mask(start, end)]
        if lo.size == 0:
            return [(0, self.capacity)]
        order = np.argsort(lo, kind="stable")
        lo, reach = lo[order], np.maximum.accumulate(hi[order])
        before = np.concatenate(([0], reach[:-1]))
        open_ = np.flatnonzero(lo > before)
        gaps = list(zip(before[open_].tolist(), lo[open_].tolist()))
        if reach[-1] < self.capacity:
            gaps.append((int(reach[-1]), self.capacity))
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
        hit = self._live_mask(start, end) & (self._cols[1] > offset) & (self._cols[0] < offset + size)
        if shared:
            hit[list(shared)] = False
        return not hit.any()

    def profile(self, time: int, bins: int) -> np.ndarray:
        """Occupied fraction of each of ``bins`` equal offset ranges at step ``time``."""
        lo, hi = self.live(time, time)[:, :2].T * (bins / self.capacity)
        # coverage is a step function with +1 at each lo and -1 at each hi; a breakpoint p
        # covers part (floor(p) + 1 - p) of its own bin and all of every later bin
        points = np.concatenate([lo, hi])
        weight = np.concatenate([np.ones(lo.size), -np.ones(hi.size)])
        first = np.floor(points).astype(np.int64)
        full = np.bincount(first + 1, weight, minlength=bins + 2).cumsum()
        part = np.bincount(first, weight * (first + 1 - points), minlength=bins + 2)
        return np.clip(full[:bins] + part[:bins], 0.0, None).astype(np.float32)

    def image(self, start: int, end: int, rows: int, cols: int) -> np.ndarray:
        """A ``rows x cols`` binary picture of steps ``[start, end]`` (columns) x offsets (rows)."""
        lo, hi, s, e = self.live(start, end).T
        tscale = cols / (end - start + 1)
        oscale = rows / self.capacity
        c0 = ((np.maximum(s, start) - start) * tscale).astype(np.int64)
        c1 = np.maximum(c0 + 1, np.ceil((np.minimum(e, end) - start + 1) * tscale).astype(np.int64))
        r0 = (lo * oscale).astype(np.int64)
        r1 = np.minimum(np.maximum(r0 + 1, np.ceil(hi * oscale).astype(np.int64)), rows)
        c1 = np.minimum(c1, cols)
        corners = np.zeros((rows + 1, cols + 1), np.int32)
        np.add.at(corners, (np.concatenate([r0, r0, r1, r1]), np.concatenate([c0, c1, c0, c1])),
                  np.repeat(np.array([1, -1, -1, 1], np.int32), lo.size))
        return (corners.cumsum(0).cumsum(1)[:rows, :cols] > 0).astype(np.float32)
