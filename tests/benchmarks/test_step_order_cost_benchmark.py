"""benchmarks/step_order_cost.py at toy sizes: the table, the JSON, and where each setting makes the marks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tempo.runtime.backends import base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.skipif("torch" not in base.available_backends(), reason="torch is not installed")
def test_torch_marks_the_until_program_and_the_exact_one_and_they_train_alike(tmp_path):
    out = tmp_path / "cost.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "step_order_cost.py"), "--quick",
                           "--backends", "numpy", "torch", "--repeats", "1", "--iterations", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {(r["backend"], r["program"], r["setting"]): r for r in json.loads(out.read_text())["rows"]}
    assert rows["numpy", "fixed", "auto"]["marked"] > 0 and rows["numpy", "fixed", "off"]["marked"] == 0
    assert rows["torch", "fixed", "auto"]["marked"] == 0 and rows["torch", "until", "off"]["marked"] == 0
    assert rows["torch", "fixed", "exact"]["marked"] == rows["torch", "until", "auto"]["marked"] > 0
    runs = {(r["backend"], r["program"], r["setting"]): r for r in json.loads(out.read_text())["runs"]}
    assert runs["torch", "fixed", "exact"]["returns"] == runs["torch", "until", "auto"]["returns"]
    assert "CPU ratio" in done.stdout
