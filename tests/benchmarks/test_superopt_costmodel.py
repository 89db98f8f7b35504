"""benchmarks/superopt/costmodel.py: the cost model beside measured latency (X-RLflow Table 1)."""
from __future__ import annotations

import argparse
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("superopt_costmodel", ROOT / "benchmarks" / "superopt" / "costmodel.py")
costmodel_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(costmodel_module)


def test_one_workload_is_priced_measured_and_tabled():
    args = argparse.Namespace(scale="small", search_s=10.0, rounds=2, compiles=1)
    row = costmodel_module.measure("resnext", "torch", args, costmodel_module.load_rules())
    assert row["cost_model_ms"] > 0 and row["e2e_ms"] > 0
    assert row["diff_pct"] == 100.0 * (row["cost_model_ms"] - row["e2e_ms"]) / row["e2e_ms"]
    assert row["greedy_rewrites"] > 0 and row["predicted_speedup"] > 1.0
    low, high = row["measured"]["ci95"]
    assert low <= row["measured"]["ratio"] <= high
    assert row["measured"]["verdict"] in ("win", "tie", "loss")
    text = costmodel_module.table([{"workload": "resnext", "backend": "torch", **row}])
    assert text.splitlines()[2].startswith(f"| resnext | torch | {row['cost_model_ms']:.3f} |")
