"""Progress accounting over instance reports."""
from __future__ import annotations

import pytest

from tempo.gmi.progress import Progress


def event(gmi, time, steps, returns, comm=0.0, started=100.0):
    return {"gmi": gmi, "kind": "progress", "time": time, "started": started, "steps": steps,
            "seconds": 0.5, "returns": returns, "comm_seconds": comm}


def test_steps_per_second_spans_first_start_to_last_report():
    lines = []
    progress = Progress(interval=0.0, window=3, echo=lines.append)
    progress(event(0, 101.0, 100, [1.0, 2.0], comm=0.1))
    progress(event(1, 102.0, 100, [3.0, 4.0], comm=0.2, started=100.5))
    progress({"gmi": 2, "kind": "trained", "samples": 64, "time": 102.0})
    progress({"gmi": 0, "kind": "done", "max_rss_mb": 300.0, "time": 102.0})
    summary = progress.summary()
    assert summary["steps_per_second"] == pytest.approx(200 / 2.0)
    assert summary["mean_return"] == pytest.approx(3.0)  # the last three episodes
    assert summary["episodes"] == 4 and summary["trained_samples"] == 64
    assert summary["comm_fraction"] == pytest.approx(0.3 / 1.0)
    assert summary["max_rss_mb"] == 300.0 and len(lines) == 2 and "comm=30.0%" in lines[-1]


def test_no_reports_yet():
    progress = Progress(echo=lambda line: None)
    assert progress.steps_per_second == 0.0 and progress.mean_return is None
    assert "mean return=n/a" in progress.line()
