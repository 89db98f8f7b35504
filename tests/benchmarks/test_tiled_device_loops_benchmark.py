"""benchmarks/tiled_device_loops.py at toy sizes: the table, the JSON, and the launches it compares."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_the_nested_loops_launch_fewer_programs_on_jax(tmp_path):
    """18 steps in tiles of 6 with 8-step returns: on JAX the nested loops' whole run launches fewer programs
    than shift fusion's loop, and at most one per steady-state iteration of the loop over i, where the
    windows' loop on the host launches one per step."""
    out = tmp_path / "tiled.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "tiled_device_loops.py"), "--steps", "18",
                           "--iterations", "2", "--tiles", "6", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {(r["backend"], r["schedule"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(b, s) for b in ("numpy", "jax") for s in ("fused", "nested")} | \
        {("jax", "host tiles"), ("jax", "host windows")}
    assert rows["jax", "nested"]["profiled_launches"] <= 1 < 18 < rows["jax", "host windows"]["profiled_launches"]
    assert rows["numpy", "fused"]["returns"] == rows["numpy", "nested"]["returns"]
    assert rows["jax", "nested"]["device_loops"] >= 1 and rows["numpy", "nested"]["device_loops"] == 0
    assert rows["jax", "nested"]["run_launches_per_iteration"] < rows["jax", "fused"]["run_launches_per_iteration"]
    assert "launches/it" in done.stdout
