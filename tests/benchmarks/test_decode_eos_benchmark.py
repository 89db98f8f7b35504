"""benchmarks/decode_eos.py --quick on JAX: the three runs keep the same tokens, and XLA's CPU is
reported apart from the process's."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 40 s: three decoding programs compiled by XLA
def test_quick_jax_run_reports_xla_cpu_apart(tmp_path):
    out = tmp_path / "decode_eos.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_eos.py"), "--quick", "--backend", "jax",
                    "--attention", "masked", "--batch", "1", "--launch-steps", "4", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["launch_steps"] == 4 and [r["run"] for r in report["rows"]] == ["fixed", "check", "eos"]
    fixed = report["rows"][0]
    tick_ms = 10 / fixed["steps"]  # XLA's CPU is counted in clock ticks of 10 ms
    assert 0 < fixed["xla_cpu_ms_per_step"] <= fixed["cpu_ms_per_step"] + tick_ms
