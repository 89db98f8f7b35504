"""Smoke tests: every example runs to completion through the tempo CLI."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args, expect", [
    ("examples/returns.py", ["--steps", "7"], "ok: returns and window means match"),
    ("examples/inspect_program.py", ["--steps", "5"], "== schedule AST =="),
    ("examples/reinforce.py", ["--iterations", "2", "--batch", "2", "--steps", "20", "--nstep", "8"],
     "mean_return="),
    ("examples/a2c.py", ["--iterations", "2", "--batch", "2", "--steps", "20"], "mean_return="),
    ("examples/ppo.py", ["--iterations", "2", "--epochs", "2", "--batch", "2", "--steps", "20"],
     "iterations=2 "),
])
def test_example_runs(script, args, expect, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tempo", "run", str(ROOT / script), *args],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
