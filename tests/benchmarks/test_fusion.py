"""benchmarks/fusion.py: one short run of an RL example, fused, unfused and superoptimised."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_fused_unfused_and_superopt_runs_train_identically_and_report_what_the_pass_did(tmp_path):
    out = tmp_path / "fusion.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fusion.py"), "--repeats", "1", "--programs",
                          "reinforce", "--batch", "2", "--steps", "12", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {row["variant"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["unfused"]["max_return_gap_to_fused"] == 0.0
    assert rows["fused"]["nodes"] < rows["unfused"]["nodes"]
    assert rows["fused"]["fuse_s"] > 0 and rows["unfused"]["fuse_s"] == 0
    assert rows["superopt"]["superopt_s"] > 0 and rows["fused"]["superopt_s"] < 0.01
    assert rows["superopt"]["max_return_gap_to_fused"] == 0.0
    assert 0 < rows["superopt"]["island_steps"] <= rows["fused"]["island_steps"]
    islands = rows["superopt"]["superopt_islands"]
    assert islands["islands"] > 0 and islands["islands"] == islands["rewritten"] + sum(islands["kept"].values())
    assert islands["kept"].get("no rule matches", 0) > 0      # opaque-only islands are not searched
    assert "reinforce  fused" in run.stdout and "wrote" in run.stdout
