"""benchmarks/ended_jax_time_split.py at a toy size: the table, the JSON and a split that adds up."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tempo.runtime.backends import base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")
def test_the_split_adds_up_to_the_total_and_both_programs_train_the_same(tmp_path):
    out = tmp_path / "split"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "ended_jax_time_split.py"),
                           "--iterations", "2", "--repeats", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "device compile" in done.stdout
    result = json.loads((tmp_path / "split.json").read_text())
    assert result["same_returns"]
    for name in ("padded", "until"):
        (run,) = result["runs"][name]
        parts = run["import"] + run["device compile"] + run["other first"] + run["later"]
        assert parts == pytest.approx(run["total"], abs=1e-6)
        assert run["device compile"] > 0 and len(run["returns"]) == 2
