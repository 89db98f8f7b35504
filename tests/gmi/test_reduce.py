"""The three reduction strategies across real gloo instances, against a float64 sum."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tempo.gmi.layout import Layout
from tempo.gmi.reduce_run import TOLERANCE, bench_reduce


def test_every_strategy_matches_the_float64_sum():
    strategies = ["mpr", "mrr", "har"]
    rows = bench_reduce(Layout.parse("2x2"), strategies, size_mb=0.05, repeats=1, seed=3)
    assert [row["strategy"] for row in rows] == strategies
    for row in rows:
        assert 0 < row["max_rel_error"] <= TOLERANCE, row
        assert row["time_ms"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("text", ["3,2,2", "1x3", "3x2"])
def test_uneven_and_crowded_layouts(text):
    rows = bench_reduce(Layout.parse(text), ["mpr", "har"], size_mb=0.2, repeats=1)
    assert all(row["max_rel_error"] <= TOLERANCE for row in rows)


def gmi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tempo", "gmi", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.slow
def test_bench_reduce_command_on_an_uneven_layout():
    done = gmi("bench-reduce", "--layout", "2,1", "--strategy", "all", "--size-mb", "0.01",
               "--repeats", "1")
    assert done.returncode == 0, done.stderr
    assert "Algorithm 1 picks har" in done.stdout
    assert "mrr skipped" in done.stdout
    assert sum(line.split()[0] in ("mpr", "har") for line in done.stdout.splitlines()) == 2


def test_bench_reduce_command_rejects_a_bad_layout_cleanly():
    done = gmi("bench-reduce", "--layout", "2by2")
    assert done.returncode != 0
    assert "tempo gmi: error: layout '2by2'" in done.stderr and "Traceback" not in done.stderr
