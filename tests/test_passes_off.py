"""The differential, gradient and RL suites pass with each pass of the pipeline switched off, and with tiles.

Each run is a fresh pytest process with ``--passes-off NAME`` (see ``tests/conftest.py``), so
every compile in those suites leaves that pass out and is still checked against its NumPy loop,
finite differences or torch. Slow: ``make test-all`` runs it.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from tempo.transforms import PIPELINE

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUITES = ["tests/api/test_differential.py", "tests/api/test_autodiff.py", "tests/rl", "tests/test_examples.py"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, _ in PIPELINE if name != "superopt"])  # superopt is opt-in
def test_the_suites_pass_with_the_pass_off(name):
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                          *SUITES, "--passes-off", name], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("tiles", ["t:1", "t:3"])
def test_the_suites_pass_with_learners_in_tiles(tiles):
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                          *SUITES, "--tiles", tiles], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
