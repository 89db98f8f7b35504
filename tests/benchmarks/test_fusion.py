"""benchmarks/fusion.py: one short run of an RL example, fused and unfused, same training curve."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_fused_and_unfused_runs_train_identically(tmp_path):
    out = tmp_path / "fusion.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fusion.py"), "--repeats", "1", "--programs",
                          "reinforce", "--batch", "2", "--steps", "12", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {row["variant"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["fused"]["identical_returns"] and rows["unfused"]["identical_returns"]
    assert rows["fused"]["nodes"] < rows["unfused"]["nodes"]
    assert rows["fused"]["fuse_s"] > 0 and rows["unfused"]["fuse_s"] == 0
    assert "reinforce  fused" in run.stdout and "wrote" in run.stdout
