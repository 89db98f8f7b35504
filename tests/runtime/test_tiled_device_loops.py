"""Device loops in tiled programs: where the learner's tiles run after acting (tiles that free nothing large
while acting), acting's loop runs as one device program, and where the tiles divide the steps, so do the
loops over tiles and the loop over i holding them: the whole run. A partial last tile (a shape that changes
from tile to tile) keeps the loops over tiles on the host, and so does a loop holding the tiles (shift
fusion). Checked against the NumPy backend's host loops, with the launches counted."""
from __future__ import annotations

import numpy as np
import pytest

from tests.schedule.test_tiled_nesting import acting_loops, fused, reinforce

pytest.importorskip("jax")

ITERATIONS = 3  # the bounds of tests.schedule.test_tiled_nesting.reinforce


@pytest.mark.parametrize("nstep, tiles, steps", [(0, 4, 10), pytest.param(3, 4, 10, marks=pytest.mark.slow),
                                                  pytest.param(3, 4, 8, marks=pytest.mark.slow)])
def test_acting_in_a_tiled_program_runs_as_one_device_program(nstep, tiles, steps):
    """Tiles of 4 steps, 10 steps (the last tile partial), or 8 with n-step returns (their windows
    ``r[t:min(t + 3, T)]`` shorter at the end, read padded: tests/runtime/test_nstep_device_loops.py):
    acting's loop is a device loop, the values are the NumPy backend's, and the run launches a program
    fewer per step than the NumPy backend's host loops of the same schedule."""
    device, program = reinforce(nstep, tiles, steps, backend="jax")
    host, on_host = reinforce(nstep, tiles, steps)
    acting = acting_loops(program)[-1]
    assert acting in [p.loop for p in program.plan.loops]
    assert "over c1 as one device launch" in program.code
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert program.ledger.launches < on_host.ledger.launches - ITERATIONS * steps   # the run's launches


def test_tiles_that_divide_the_steps_make_the_whole_run_one_device_program():
    """Tiles of 4 steps, 8 steps: every tile has 4 rows, which each launch checks with the run's bounds,
    so the loops over tiles run as device loops, nested with acting's loop in the loop over i: one
    device program for the whole run, the sinks called after its launches with the NumPy backend's
    values, and a quarter of the launches of the NumPy backend's host loops; the whole run compiles
    one program, its first launch (iteration 0 alone) included."""
    device, program = reinforce(0, 4, 8, backend="jax")
    host, on_host = reinforce(0, 4, 8)
    plan = program.plan
    whole = next(p for p in plan.loops if p.loop is plan.main_loop)
    assert len(whole.nested) == len([p for p in plan.loops if p.loop is not plan.main_loop]) + 1  # and c2's
    assert "the main loop: the whole run" in str(plan) and "over c0 as one device launch" in program.code
    assert len(device) == len(host) == 2 * ITERATIONS
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert program.ledger.launches * 4 < on_host.ledger.launches
    main = [compiled for loop, compiled in program.backend.loops.values() if loop is plan.main_loop]
    assert [len(compiled.fns) for compiled in main] == [1]  # the first launch and the later ones: one program
    rows = program.profile(bounds(8)).per_iteration()
    assert set(rows) == {"device loop"} and rows["device loop"][0] == pytest.approx(1 / (ITERATIONS - 1))


@pytest.mark.slow
def test_one_program_runs_whole_where_its_tiles_divide_the_steps_and_tile_by_tile_where_not():
    """The program is compiled for every bound: run for 8 steps, every tile has 4 rows and the whole run
    is one device program; run for 10, the last tile is partial, the launches' checks fail and the host
    runs the loops over tiles. Both runs compute the NumPy backend's values."""
    device, _ = reinforce(0, 4, 8, backend="jax", runs=(8, 10, 8))
    host, _ = reinforce(0, 4, 8, runs=(8, 10, 8))
    for (values, launches), (reference, host_launches) in zip(device, host):
        assert len(values) == len(reference) == 2 * ITERATIONS
        for x, y in zip(values, reference):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    (_, whole), (_, tiled), (_, again) = device
    assert whole * 4 < host[0][1] and tiled > 3 * whole and again == whole


def bounds(steps: int) -> dict:
    """The bounds of tests.schedule.test_tiled_nesting.reinforce at ``steps`` steps."""
    return {"B": 2, "I": ITERATIONS, "T": steps}


@pytest.mark.slow
def test_a_loop_holding_the_tiles_runs_on_the_host(monkeypatch):
    """Shift fusion's schedule (the tiles inside acting's loop, reading rows acting wrote in the same
    loop) has no device loop on JAX, and computes the NumPy backend's values."""
    device, program = fused(monkeypatch, 3, 4, 10, backend="jax")
    host, _ = fused(monkeypatch, 3, 4, 10)
    assert not program.plan.loops and "device launch" not in program.code
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
