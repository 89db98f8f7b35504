"""benchmarks/superopt_summary.py: verdicts across reports, and the target per report."""
from __future__ import annotations

import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("superopt_summary", ROOT / "benchmarks" / "superopt_summary.py")
summary_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary_module)


def report(verdicts: dict[str, str]) -> dict:
    ratio = {"win": 1.05, "tie": 1.0, "loss": 0.95}
    return {"workloads": {w: {"rl_vs_best": {"verdict": v, "ratio": ratio[v], "baseline": "greedy"}}
                          for w, v in verdicts.items()}}


def test_counts_per_workload_and_the_target_per_report(tmp_path):
    three_wins = report({"a": "win", "b": "win", "c": "win", "d": "tie"})
    a_loss = report({"a": "win", "b": "win", "c": "win", "d": "loss"})
    paths = []
    for name, r in (("s0", three_wins), ("s1", a_loss)):
        paths.append(str(tmp_path / f"{name}.json"))
        pathlib.Path(paths[-1]).write_text(json.dumps(r))
    summary = summary_module.summarise(summary_module.load(paths))
    assert summary["target"]["s0"] == {"win": 3, "tie": 1, "loss": 0, "met": True}
    assert summary["target"]["s1"]["met"] is False
    assert summary["workloads"]["d"]["tie"] == 1 and summary["workloads"]["d"]["loss"] == 1
    assert summary["workloads"]["a"]["reports"]["s1"]["ratio"] == 1.05
    text = summary_module.table(summary, ["s0", "s1"])
    assert "| d | tie (1.000) | loss (0.950) | 0 | 1 | 1 |" in text
    assert "s1: 3 win, 0 tie, 1 loss; target (no loss, >= 3 wins) not met" in text
