"""examples/superopt_onnx.py: each agent keeps to its budget, and no temporary file stays."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tempo.superopt.optimize import BUDGET_TOLERANCE_S

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_keeps_to_its_budget_and_leaves_no_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    budget = 8.0                  # the command's imports count, a few seconds on a loaded machine
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "superopt_onnx.py"), "--workload",
                          "resnext", "--agents", "greedy", "rl", "--budget-seconds", str(budget),
                          "--rounds", "2"],
                         env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    for agent in ("greedy", "rl"):
        took = re.search(rf"^{agent}: (?:.* )?in ([0-9.]+) s \(budget {budget:g} s\)", out.stdout, re.M)
        assert took, out.stdout
        assert float(took.group(1)) <= budget + BUDGET_TOLERANCE_S
        assert re.search(rf"^{agent}: \S+ computes the input's outputs: True$", out.stdout, re.M)
    left = [p.name for p in tmp.iterdir() if p.name.startswith("superopt_")]
    assert left == []             # the example's folder (torch_geometric keeps its modules there)
