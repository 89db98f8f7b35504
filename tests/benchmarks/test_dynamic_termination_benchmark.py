"""benchmarks/dynamic_termination.py: both programs train the same, each worker with its bytecode cached."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_both_programs_train_the_same_and_their_workers_cache_bytecode(tmp_path):
    out = tmp_path / "dt"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dynamic_termination.py"), "--batch", "1", "--baseline",
                    "episode", "--iterations", "3", "--seeds", "0", "--repeats", "1", "--out", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    record = json.loads(out.with_suffix(".json").read_text())
    (seed,) = record["seeds"]
    padded, until = seed["programs"]["padded"], seed["programs"]["until"]
    assert seed["identical_iterations"] == padded["iterations"] == until["iterations"] == 3
    assert padded["env_steps"] == until["env_steps"] == until["computed_steps"] < padded["computed_steps"]
    assert "cached" in record["bytecode"] and "pycache" not in record["settings"]
    for program in (padded, until):  # the training's seconds are the process's after its imports
        assert 0 < program["training_cpu_s"] < program["cpu_s"] and 0 < program["training_wall_s"] < program["wall_s"]
    assert set(record["speedup"]) == {"wall", "cpu", "training_wall", "training_cpu"}
