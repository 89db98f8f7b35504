"""benchmarks/decode_gpu.py: its timing of launches, its order of work and budget, and (slow) a
``--device cpu --quick`` run whose JSON holds every system's rows, the copy bandwidth, the floors
and the token check."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "decode_gpu.py"


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports decode.py and decode_floor.py
    spec = importlib.util.spec_from_file_location("decode_gpu_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_step_is_timed_from_whole_launches(script):
    """Tokens arrive a launch at a time: position 1 (the prompt's launch), then launches of 16 steps
    of 1 ms each and a last one of 4 steps of 3 ms; the time per step is the full launches'."""
    stamps, wall, launch = {1: (5.0, 100)}, 5.0, 100
    for first, steps, ms in [(2, 16, 900.0), (18, 16, 1.0), (34, 16, 1.0), (50, 16, 1.0), (66, 4, 3.0)]:
        launch += 1
        wall += steps * ms / 1e3
        stamps.update({p: (wall + 1e-6 * (p - first), launch) for p in range(first, first + steps)})
    runs = script.launch_runs(stamps)
    assert [(r[1], r[2]) for r in runs] == [(1, 1), (2, 17), (18, 33), (34, 49), (50, 65), (66, 69)]
    steady = script.steady_step(runs, 70 - 52, 70)
    assert steady["launch_steps"] == 16 and steady["launches_timed"] == 4 and steady["steps_timed"] == 52
    assert steady["ms"] == pytest.approx(1.0, rel=1e-3)
    assert steady["mean_ms"] == pytest.approx((48 * 1.0 + 4 * 3.0) / 52, rel=1e-3)
    inside = script.steady_step(runs, 60, 64)  # no launch wholly inside: the one that overlaps
    assert inside["launches_timed"] == 1 and inside["ms"] == pytest.approx(1.0, rel=1e-3)


def test_the_main_rows_come_first_and_the_static_cache_last(script):
    jobs = script.work_order(["tempo", "transformers", "transformers-static"], [1, 4, 16], [256, 1024, 4096])
    assert jobs[:5] == [("tempo", 1, 1024), ("transformers", 1, 1024), ("tempo", 4, 1024),
                        ("transformers", 4, 1024), ("bandwidth", None, None)]
    plain = [j for j in jobs if j[0] in ("tempo", "transformers")]
    assert len(plain) == 18 and [n for _, _, n in plain[-6:]] == [4096] * 6
    assert {j[0] for j in jobs[-9:]} == {"transformers-static"}


def test_tokens_compared_step_by_step(script):
    same = script.same_tokens([[1, 2, 3], [4, 5, 6]], [[1, 2, 9], [4, 5, 6]])
    assert same == {"same": 5, "tokens": 6, "first_difference": 2}


def test_a_spent_budget_skips_every_configuration(tmp_path):
    out = tmp_path / "decode_gpu.json"
    subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--budget-s", "0", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=120)
    report = json.loads(out.read_text())
    assert report["rows"] == [] and len(report["skipped"]) == 2 * 3 + 1   # 2 batches x 3 systems, the bandwidth


@pytest.mark.slow  # about 25 s: Tempo compiles two decoding programs for XLA's CPU
def test_quick_cpu_run_reports_every_system_and_the_floor(tmp_path):
    out = tmp_path / "decode_gpu.json"
    subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["skipped"] == [] and report["workers"]["jax"]["ready"] and report["workers"]["torch"]["ready"]
    assert {"jax", "jaxlib", "numpy"} <= set(report["workers"]["jax"]["versions"])
    assert {"torch", "transformers"} <= set(report["workers"]["torch"]["versions"])
    assert all(rate["gb_s"] > 0 for rate in report["bandwidth"].values())
    rows = {(r["system"], r["batch"]): r for r in report["rows"]}
    assert set(rows) == {(s, b) for s in ("tempo", "transformers", "transformers-static") for b in (1, 2)}
    for (system, batch), row in rows.items():
        assert "error" not in row, row
        assert row["ms"] > 0 and row["floor_ms"] > 0 and row["ms_per_token"] == pytest.approx(row["ms"] / batch)
    for batch in (1, 2):
        tempo = rows[("tempo", batch)]
        assert tempo["launch_steps"] > 1  # the decoding loop runs as device programs of several steps
        assert tempo["compile_s"] > 0 and tempo["first_token_s"] > 0 and tempo["first_launch_s"] > 0
        assert tempo["same_tokens"] == {"same": 8 * batch, "tokens": 8 * batch, "first_difference": None}
