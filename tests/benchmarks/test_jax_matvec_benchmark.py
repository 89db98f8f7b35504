"""benchmarks/jax_matvec.py: each configuration runs in its own process and its row is written."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 20 s: a process per configuration, each importing JAX
def test_a_short_run_writes_every_configuration(tmp_path):
    out = tmp_path / "jax_matvec.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jax_matvec.py"), "--batches", "1", "--steps", "2",
                    "--repeats", "1", "--rounds", "1", "--out", str(out)], check=True, capture_output=True, text=True,
                   timeout=600)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["system"], r["layout"], r["threads"]) for r in rows} == {
        ("xla", layout, threads) for layout in ("stored", "transposed") for threads in ("1", "pool")} | {
        ("numpy", "stored", "1")}
    assert all(r["cpu_ms_per_step"] > 0 and r["gb_per_s"] > 0 for r in rows)
