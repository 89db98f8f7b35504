"""benchmarks/memory.py's PPO experiment, at toy sizes: the table, the JSON and the plot."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_the_ppo_budget_experiment_writes_both_systems_per_size(tmp_path):
    out = tmp_path / "ppo.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "memory.py"), "--experiments", "ppo",
                           "--obs", "3,8,8", "3,32,32", "--ppo-steps", "40", "--budget", "8MB", "--quick",
                           "--ppo-out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    budget = data["budget_bytes"]
    tempo = [r for r in data["results"] if r["system"] == "tempo"]
    baseline = [r for r in data["results"] if r["system"] == "cleanrl"]
    assert [r["obs"] for r in tempo] == ["3,8,8", "3,32,32"]
    assert all(r["device_bytes"] <= budget for r in tempo)
    assert baseline and baseline[-1]["device_bytes"] > budget or len(baseline) == 2  # run until over the budget
    assert (tmp_path / "ppo.png").exists() and "device budget" in done.stdout


@pytest.mark.slow
def test_the_recompute_experiment_fits_a_budget_only_by_recomputing(tmp_path):
    out = tmp_path / "recompute.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "memory.py"), "--experiments",
                           "recompute", "--recompute-budgets", "64MB", "--quick", "--recompute-out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    by = {(r["budget"], r["costs"]): r for r in data["results"]}
    budget = 64 * 10**6
    assert not by[(budget, "cpu")]["fits"] and by[(budget, "gpu")]["fits"]
    assert by[(budget, "gpu")]["device_bytes"] <= budget
    assert by[(budget, "gpu")]["cached_nodes"] < by[(None, "cpu")]["cached_nodes"]
    assert data["returns_identical"]


@pytest.mark.slow
def test_the_reinforce_experiment_without_flags_splits_each_backends_peak(tmp_path):
    from tempo.runtime.backends import base

    backends = ["numpy"] + (["jax"] if "jax" in base.available_backends() else [])
    out = tmp_path / "reinforce.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "memory.py"), "--experiments",
                           "reinforce", "--steps", "40", "--quick", "--tiles", "0", "--no-checkpoint", "--backends",
                           *backends, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["checkpoint"] is False and data["tiles"] == 0
    assert sorted((r["backend"], r["nstep"]) for r in data["results"]) == sorted((b, n) for b in backends for n in (0, 8))
    for r in data["results"]:
        assert 0 < r["runtime_rss_bytes"] < r["import_rss_bytes"] < r["peak_rss_bytes"]
        assert r["end_rss_bytes"] <= r["peak_rss_bytes"]
        assert (r["compiles"] > 0 and r["kernels_rss_bytes"] > 0) if r["backend"] == "jax" else r["compiles"] == 0
    assert "compiles" in done.stdout and (tmp_path / "reinforce.png").exists()
