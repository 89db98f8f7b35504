"""The run-time end checks of ``tpo.end_when``: how many steps run between host reads of the flag."""
from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tempo.runtime.ends import MAX_EVERY, every_for


@given(st.integers(1, 2000), st.floats(1e-7, 1e-2), st.floats(1e-6, 1e-1))
def test_the_steps_between_reads_cost_least(length, latency, step):
    k = every_for(length, latency, step)
    assert 1 <= k <= MAX_EVERY

    def cost(every):  # reads, and the steps run past the end on average
        return length / every * latency + (every - 1) / 2 * step

    best = min(range(1, MAX_EVERY + 1), key=cost)
    assert cost(k) <= cost(best) * 1.1 + 1e-12 or math.isclose(cost(k), cost(best))


def test_reads_are_spaced_by_the_square_root_of_their_cost_in_steps():
    assert every_for(10, 1e-6, 1e-3) == 1
    assert every_for(500, 1e-5, 1e-5) == 32           # sqrt(2 * 500), rounded
    assert every_for(10_000, 1.0, 1e-6) == MAX_EVERY
