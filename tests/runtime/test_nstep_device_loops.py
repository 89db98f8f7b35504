"""n-step returns in device loops: a window ``r[t:min(t + n, T)]``, shorter at the end of the dim, is read
as ``n`` rows with zeros past the last where the statement reading it ignores zero padding (a discounted
sum), so the loop over ``t`` of the nested schedule runs inside the whole run's device program. Checked
against the NumPy backend's host loops, with the launches counted; a reader that does not ignore the
padding (a mean, a max) keeps the loop over ``t``, and so the loop over ``i``, on the host."""
from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from tempo.plan.loop_plan import WINDOW
from tests.schedule.test_tiled_nesting import reinforce

pytest.importorskip("jax")

ITERATIONS = 3  # the bounds of tests.schedule.test_tiled_nesting.reinforce
ROOT = Path(__file__).resolve().parents[2]


def windows(program) -> list:
    """The window sources of the nested loops of the main loop's device plan."""
    plan = program.plan
    whole = [p for p in plan.loops if p.loop is plan.main_loop]
    return [src for p in whole for n in p.nested for _, src in n.inputs if src.kind == WINDOW]


def assert_same(device: list, host: list) -> None:
    assert len(device) == len(host) == 2 * ITERATIONS
    for x, y in zip(device, host):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nstep, tiles, steps", [
    (3, 4, 8), (3, None, 7),
    pytest.param(5, 3, 12, marks=pytest.mark.slow), pytest.param(10, 2, 6, marks=pytest.mark.slow),
    pytest.param(2, None, 9, marks=pytest.mark.slow)])
def test_n_step_returns_run_in_the_whole_run_s_device_program(nstep, tiles, steps):
    """Tiles that divide the steps, or the tiles the compiler chooses (none with 3x4x4 observations), and
    windows longer than the run (10 steps ahead of 6): the loop over ``t`` reads its windows padded with
    zeros inside the loop over ``i``'s device program, which computes the NumPy backend's values with a
    quarter of its launches or fewer."""
    device, program = reinforce(nstep, tiles, steps, backend="jax")
    host, on_host = reinforce(nstep, tiles, steps)
    assert [src.shift for src in windows(program)] == [nstep]
    assert "over c0 as one device launch" in program.code
    assert_same(device, host)
    assert program.ledger.launches * 4 < on_host.ledger.launches


@pytest.mark.slow
def test_a_partial_last_tile_runs_the_windows_on_the_host():
    """Tiles of 4 over 10 steps: the launch's check of the tiles fails at the partial last tile, the host
    runs the loop over ``i`` and its loop over ``t``, and the values are the NumPy backend's."""
    device, program = reinforce(3, 4, 10, backend="jax")
    host, on_host = reinforce(3, 4, 10)
    assert windows(program)
    assert_same(device, host)
    assert program.ledger.launches > on_host.ledger.launches // 2


@pytest.mark.slow
@pytest.mark.parametrize("returns", [lambda w: w.mean(), lambda w: w.max()], ids=["mean", "max"])
def test_a_reader_the_padding_changes_keeps_its_loop_on_the_host(returns):
    """A mean of the window (it divides by the padded count) or its max (zero padding wins over
    negative rewards): no window source, the loop over ``i`` on the host, the NumPy backend's values."""
    device, program = reinforce(3, 4, 8, backend="jax", returns=returns)
    host, on_host = reinforce(3, 4, 8, returns=returns)
    assert not windows(program)
    assert not any(p.loop is program.plan.main_loop for p in program.plan.loops)
    assert_same(device, host)


def example(backend: str, monkeypatch) -> tuple[dict, object]:
    """``examples/reinforce.py`` with 3-step returns in tiles of 4 over 16 steps, 4 iterations (the last one
    learns nothing: its statements of the learner run at no iteration of it): its summary and program."""
    from tempo.api import compile as compile_mod

    programs, compile_program = [], compile_mod.compile_program

    def kept(*args, **kwargs):
        programs.append(compile_program(*args, **kwargs))
        return programs[-1]

    reinforce_py = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    with monkeypatch.context() as patch:
        patch.setattr(compile_mod, "compile_program", kept)
        summary = reinforce_py["main"](reinforce_py["Args"](
            env="tempo/Synthetic-v0", impl="tensor", obs_shape="3,4,4", batch=2, steps=16, iterations=4, nstep=3,
            tiles=4, backend=backend))
    return summary, programs[-1]


@pytest.mark.slow
def test_the_example_s_last_iteration_which_learns_nothing_runs_in_the_same_program(monkeypatch):
    """The example's whole run is one device program: the last iteration, where the learner's tile loops run
    no statement, is launched with the iterations before it (its tiles' shapes those of every tile), and
    the returns are the NumPy backend's."""
    device, program = example("jax", monkeypatch)
    host, on_host = example("numpy", monkeypatch)
    np.testing.assert_allclose(device["returns"], host["returns"], rtol=1e-5)
    assert "over c0 as one device launch" in program.code
    assert program.ledger.launches * 4 < on_host.ledger.launches
