"""Memory accounting: what the tensor stores hold over a run, its peak and the tensors holding it."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.runtime import memory
from tempo.runtime.memory import Ledger


def test_the_ledger_tracks_live_bytes_the_peak_and_its_holders():
    ledger = Ledger()
    ledger.add("a", 1000)
    ledger.add("b", 3000)
    ledger.add("a", -1000)
    ledger.add("c", 500)
    assert ledger.live["device"] == 3500 and ledger.peak["device"] == 4000
    assert ledger.peak_holders == {"a": 1000, "b": 3000}
    assert "b" in ledger.report() and "3.9 KiB" in ledger.report()


def test_a_run_reports_its_peak_and_the_learner_sized_tensors_holding_it(tmp_path):
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.ones((2, 50, 1000), np.float32), dims=(i, t))
        total = (x[i, 0:T] * 2.0).sum()           # i vectorized: one (2, 50, 1000) float32 product
        program = ctx.compile([total], passes={"fuse": False})
    with pytest.raises(TempoError, match="call program.run"):
        program.memory_report()
    program.run({I: 2, T: 50})
    report = program.memory_report()
    assert program.ledger.peak["device"] >= 2 * 50 * 1000 * 4
    assert "peak device bytes: 390.6 KiB" in report
    assert "390.6 KiB  ElementwiseOp" in report
    path = tmp_path / "memory.png"
    program.plot_memory(str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("backend", ["torch"])
def test_torch_accounts_the_bytes_numpy_does(backend):
    """Views of a store's buffer count nothing on torch either: the peaks agree with NumPy's.
    (JAX has no views: its slice reads are arrays of their own, and count.)"""
    pytest.importorskip(backend)
    peaks = {}
    for name in ("numpy", backend):
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            s = tpo.placeholder((20000,), "float32", dims=(t,))
            s[0] = tpo.from_numpy(np.ones(20000, np.float32))
            s[t + 1] = (s[t] * 0.5).tanh() + 1.0
            program = ctx.compile([s[0:t + 1].sum()], backend=name)
        program.run({T: 6})
        peaks[name] = program.ledger.peak["device"]
    assert peaks[backend] == peaks["numpy"] > 6 * 20000 * 4


def test_a_long_runs_timeline_stays_bounded_and_keeps_its_highs(monkeypatch):
    """A run that allocates and frees every iteration samples the timeline twice an iteration;
    past the bound each pair keeps its higher sample, so the highs (and the peak's) survive."""
    monkeypatch.setattr(memory, "TIMELINE_SAMPLES", 64)
    ledger = Ledger()
    ledger.add("weights", 1 << 20)
    for iteration in range(1000):
        ledger.launches += 1
        rollout = (4 << 20) + (iteration % 7) * (1 << 18)
        ledger.add("rollout", rollout)
        ledger.add("rollout", -rollout)
    assert 32 <= len(ledger.timeline) <= 64
    totals = [device + host for _, device, host in ledger.timeline]
    assert max(totals) == ledger.peak["device"] == (1 << 20) + (4 << 20) + 6 * (1 << 18)
    assert [launch for launch, _, _ in ledger.timeline] == sorted(launch for launch, _, _ in ledger.timeline)


def test_each_halving_of_the_timeline_doubles_the_move_that_takes_a_sample(monkeypatch):
    """Moves of 1.5% of the peak each take a sample until the timeline is halved twice; then the band
    (4 x 0.5% of the peak each side) holds them, and the timeline stops growing."""
    monkeypatch.setattr(memory, "TIMELINE_SAMPLES", 16)
    ledger = Ledger()
    ledger.add("weights", 100 << 20)
    for _ in range(200):
        ledger.launches += 1
        ledger.add("rollout", 3 << 19)
        ledger.add("rollout", -(3 << 19))
    assert ledger._coarser == 4 and len(ledger.timeline) <= 16
    assert ledger.peak["device"] == (100 << 20) + (3 << 19) and max(d for _, d, _ in ledger.timeline) == ledger.peak["device"]


def test_halving_keeps_the_larger_of_each_pair_and_an_odd_last_sample():
    samples = [(0, 5, 0), (1, 9, 0), (2, 3, 1), (3, 1, 0), (4, 7, 0)]
    assert memory.halved(samples) == [(1, 9, 0), (2, 3, 1), (4, 7, 0)]
