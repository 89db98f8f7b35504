"""The whole suite compiles with the SDG verifier on after every pass (``TEMPO_VERIFY=1``).

``--passes-off cse,dce`` switches passes off for every compile that does not
configure them itself (``TEMPO_PASSES_OFF``); ``--tiles t:3`` tiles dim ``t``
in every compile that does not configure the tiling pass (``TEMPO_TILES``).
The differential suite runs twice: with every pass, and with the simplification passes
(:data:`tempo.transforms.SIMPLIFICATION`) off, so each program is checked
against its NumPy loop both ways.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("TEMPO_VERIFY", "1")


def pytest_addoption(parser):
    parser.addoption("--passes-off", default="", help="comma-separated passes to switch off in every compile")
    parser.addoption("--tiles", default="", help="dim:size pairs the tiling pass cuts in every compile (t:3)")


def pytest_configure(config):
    off = config.getoption("--passes-off")
    if off:
        os.environ["TEMPO_PASSES_OFF"] = off
    tiles = config.getoption("--tiles")
    if tiles:
        os.environ["TEMPO_TILES"] = tiles


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.endswith("test_differential") and "pipeline" in metafunc.fixturenames:
        metafunc.parametrize("pipeline", ["all passes", "no simplification"], indirect=True)


@pytest.fixture(autouse=True)
def pipeline(request, monkeypatch):
    """Which passes the test's compiles run (see the module docstring)."""
    if getattr(request, "param", "all passes") == "no simplification":
        from tempo.transforms import SIMPLIFICATION

        off = [n for n in os.environ.get("TEMPO_PASSES_OFF", "").split(",") if n]
        monkeypatch.setenv("TEMPO_PASSES_OFF", ",".join(dict.fromkeys(off + list(SIMPLIFICATION))))
    return getattr(request, "param", "all passes")
