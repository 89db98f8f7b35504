"""benchmarks/memory.py's swap-plan experiment at a toy size: both plans, identical returns, memplan keeping what fits."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_swap_plan_experiment_runs_both_plans_with_identical_returns(tmp_path):
    out = tmp_path / "plans.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "memory.py"), "--experiments",
                           "swap-plan", "--plan-obs", "3,32,32", "--ppo-steps", "40", "--budget", "16MB", "--quick",
                           "--plan-repeats", "1", "--swap-plan-out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    by = {r["plan"]: r for r in data["results"]}
    assert data["returns_identical"] and set(by) == {"default", "memplan"}
    assert by["default"]["evicted_bytes"] > 0 and by["memplan"]["evicted_bytes"] == 0  # the observations fit
    assert all(r["device_bytes"] <= data["budget_bytes"] for r in data["results"])
