"""Instance statistics the agents normalise with: the benefit unit and the price of fast memory."""
from __future__ import annotations

import pytest

from tempo.memplan.features import benefit_scale, memory_price
from tempo.memplan.problem import Buffer, Instance


def _instance(capacity: int, rows) -> Instance:
    """rows: (size, live_range, benefit), outputs of one tensor each."""
    buffers = tuple(Buffer(i, size, True, live[0], i, None, live, 1.0, benefit)
                    for i, (size, live, benefit) in enumerate(rows))
    return Instance(capacity, (1.0,) * 10, buffers)


def test_memory_price_is_the_density_of_the_buffer_that_overflows_fast_memory():
    # fast memory holds 4 x 10 = 40 byte-steps; densities 1.0 (area 20), 0.5 (area 16), 0.25 (area 8)
    inst = _instance(4, [(2, (0, 9), 20.0), (2, (0, 7), 8.0), (1, (2, 9), 2.0)])
    assert memory_price(inst) == pytest.approx(0.25)
    assert benefit_scale(inst) == pytest.approx(10.0)


def test_memory_price_is_zero_when_every_buffer_fits():
    inst = _instance(8, [(2, (0, 9), 20.0), (2, (0, 7), 8.0), (1, (2, 9), 2.0)])
    assert memory_price(inst) == 0.0
