"""benchmarks/stores.py: a short run of both programs with chosen and with point stores."""
from __future__ import annotations

import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("stores_benchmark", ROOT / "benchmarks" / "stores.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_block_and_window_stores_are_chosen_and_window_memory_is_flat(tmp_path):
    out = tmp_path / "stores.json"
    _benchmark().main(["--causal", "40", "80", "--window", "40", "160", "--window-width", "8",
                       "--iterations", "2", "--repeats", "1", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    kinds = {(r["program"], r["stores_option"]): r["store"] for r in rows}
    assert kinds == {("causal", "auto"): "block", ("causal", "point"): "point",
                     ("window", "auto"): "window", ("window", "point"): "point"}
    held = {(r["program"], r["stores_option"], r["T"]): r["bytes_held"] for r in rows}
    assert held[("window", "auto", 40)] == held[("window", "auto", 160)] == 2 * 8 * 32 * 4
    assert held[("window", "point", 160)] == 4 * held[("window", "point", 40)]  # every point of the episode
    assert held[("causal", "auto", 80)] == 80 * 32 * 4  # one block of T rows
