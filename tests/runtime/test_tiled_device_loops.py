"""Device loops in tiled programs: acting's loop runs as one device program where the learner's tiles run
after it (tiles that free nothing large while acting); the loops over tiles, whose last tile may be
partial (a shape that changes from tile to tile), and a loop holding the tiles (shift fusion) run on
the host. Checked against the NumPy backend's host loops, with the launches counted."""
from __future__ import annotations

import numpy as np
import pytest

from tests.schedule.test_tiled_nesting import acting_loops, fused, reinforce

pytest.importorskip("jax")

ITERATIONS = 3  # the bounds of tests.schedule.test_tiled_nesting.reinforce


@pytest.mark.parametrize("nstep, tiles, steps", [(0, 4, 10), pytest.param(3, 4, 10, marks=pytest.mark.slow),
                                                  pytest.param(0, 4, 8, marks=pytest.mark.slow)])
def test_acting_in_a_tiled_program_runs_as_one_device_program(nstep, tiles, steps):
    """Tiles of 4 steps, 10 steps (the last tile partial) or 8: acting's loop is a device loop, the
    values are the NumPy backend's, and the run launches a program fewer per step than the NumPy
    backend's host loops of the same schedule."""
    device, program = reinforce(nstep, tiles, steps, backend="jax")
    host, on_host = reinforce(nstep, tiles, steps)
    acting = acting_loops(program)[-1]
    assert [p.loop for p in program.plan.loops] == [acting]                 # the loops over tiles: the host
    assert "over c1 as one device launch" in program.code
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert program.ledger.launches < on_host.ledger.launches - ITERATIONS * steps   # the run's launches


@pytest.mark.slow
def test_a_loop_holding_the_tiles_runs_on_the_host(monkeypatch):
    """Shift fusion's schedule (the tiles inside acting's loop, reading rows acting wrote in the same
    loop) has no device loop on JAX, and computes the NumPy backend's values."""
    device, program = fused(monkeypatch, 3, 4, 10, backend="jax")
    host, _ = fused(monkeypatch, 3, 4, 10)
    assert not program.plan.loops and "device launch" not in program.code
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
