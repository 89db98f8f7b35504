"""The occupancy index's pictures against brute-force painting of each allocation."""
from __future__ import annotations

import math

import numpy as np

from tempo.memplan.occupancy import OffsetIndex


def _random_index(seed: int, capacity: int = 96, steps: int = 50, n: int = 40) -> OffsetIndex:
    rng = np.random.default_rng(seed)
    index = OffsetIndex(capacity, steps)
    for key in range(n):
        size = int(rng.integers(1, capacity // 4))
        start = int(rng.integers(0, steps))
        end = int(rng.integers(start, min(steps, start + 12)))
        offset = index.lowest_fit(size, start, end)
        if offset is not None:
            index.add(key, offset, size, start, end)
    index.remove(3)
    return index


def test_profile_is_the_occupied_share_of_each_offset_range():
    for seed in range(5):
        index = _random_index(seed)
        for time in (0, 17, 49):
            dense = np.zeros(index.capacity)
            for lo, hi, s, e in index.rects.values():
                if s <= time <= e:
                    dense[lo:hi] += 1
            for bins in (8, 32, 96, 256):
                edges = np.arange(bins + 1) * index.capacity / bins
                expected = [sum(dense[k] * max(0.0, min(k + 1, b) - max(k, a))
                                for k in range(math.floor(a), min(math.ceil(b), index.capacity)))
                            / (b - a) for a, b in zip(edges[:-1], edges[1:])]
                np.testing.assert_allclose(index.profile(time, bins), expected, atol=1e-5)


def test_image_paints_every_live_allocation():
    for seed in range(5):
        index = _random_index(seed)
        for start, end, rows, cols in ((0, 49, 16, 16), (10, 30, 32, 8), (5, 5, 12, 20)):
            expected = np.zeros((rows, cols), np.float32)
            tscale, oscale = cols / (end - start + 1), rows / index.capacity
            for lo, hi, s, e in index.rects.values():
                if s > end or e < start:
                    continue
                c0 = int((max(s, start) - start) * tscale)
                c1 = min(max(c0 + 1, math.ceil((min(e, end) - start + 1) * tscale)), cols)
                r0 = int(lo * oscale)
                r1 = min(max(r0 + 1, math.ceil(hi * oscale)), rows)
                expected[r0:r1, c0:c1] = 1.0
            np.testing.assert_array_equal(index.image(start, end, rows, cols), expected)
