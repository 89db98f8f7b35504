"""benchmarks/superopt/summary.py: verdicts across reports, and the target per report."""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("superopt_summary", ROOT / "benchmarks" / "superopt" / "summary.py")
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
    assert summary["target"]["s0"] == {"win": 3, "tie": 1, "loss": 0, "met": True,
                                       "false_controls": 0}
    assert summary["target"]["s1"]["met"] is False
    assert summary["workloads"]["d"]["tie"] == 1 and summary["workloads"]["d"]["loss"] == 1
    assert summary["workloads"]["a"]["reports"]["s1"]["ratio"] == 1.05
    text = summary_module.table(summary, ["s0", "s1"])
    assert "| d | tie (1.000) | loss (0.950) | 0 | 1 | 1 |" in text
    assert "s1: 3 win, 0 tie, 1 loss; target (no loss, >= 3 wins) not met" in text


def test_verdicts_are_judged_again_per_compile_pair_from_the_round_medians(tmp_path):
    # 40 rounds, 4 compiles: rl is 2% faster in the rounds of three compile pairs and 2% slower in
    # the fourth's; recorded per round that was a win, per compile pair it is a tie
    rl = [1 / 1.02 if r % 4 < 3 else 1 / 0.98 for r in range(40)]
    control = [1.0] * 40                                    # greedy again: no difference
    medians = {"greedy": [1.0] * 40, "rl": rl, "greedy again": control}
    workload = {"rl_vs_best": {"verdict": "win", "ratio": 1.02, "baseline": "greedy",
                               "same_graph": False},
                "control": {"verdict": "loss"}, "round_medians_ms": medians}
    path = tmp_path / "s0.json"
    path.write_text(json.dumps({"compiles": 4, "workloads": {"a": workload}}))
    reports = summary_module.load([str(path)])
    judged = summary_module.summarise(reports)
    assert judged["workloads"]["a"]["reports"]["s0"]["verdict"] == "tie"
    assert judged["target"]["s0"]["false_controls"] == 0
    recorded = summary_module.summarise(reports, as_recorded=True)
    assert recorded["workloads"]["a"]["reports"]["s0"] == {"verdict": "win", "ratio": 1.02,
                                                           "baseline": "greedy"}
    assert recorded["target"]["s0"]["false_controls"] == 1


def test_the_controls_lean_is_pooled_over_compile_pairs_per_workload_and_in_all(tmp_path):
    # 8 rounds, 4 compiles: the control is faster in 3 of a's compile pairs and in 1 of b's
    faster = {"a": [0.99, 0.99, 0.99, 1.01], "b": [1.01, 1.01, 1.01, 0.99]}
    workloads = {}
    for w, pairs in faster.items():
        medians = {"greedy": [1.0] * 8, "rl": [1.0] * 8,
                   "greedy again": [pairs[r % 4] for r in range(8)]}
        workloads[w] = {"rl_vs_best": {"verdict": "tie", "ratio": 1.0, "baseline": "greedy",
                                       "same_graph": False},
                        "control": {"verdict": "tie"}, "round_medians_ms": medians}
    path = tmp_path / "s0.json"
    path.write_text(json.dumps({"compiles": 4, "workloads": workloads}))
    summary = summary_module.summarise(summary_module.load([str(path)]))
    lean = summary["control_lean"]
    assert (lean["a"]["above"], lean["a"]["of"]) == (3, 4)
    assert (lean["b"]["above"], lean["b"]["of"]) == (1, 4)
    assert (lean["all"]["above"], lean["all"]["of"], lean["all"]["p"]) == (4, 8, 1.0)
    assert "a 3 of 4 (p=0.62); b 1 of 4 (p=0.62); all 4 of 8 (p=1)" in \
        summary_module.table(summary, ["s0"])


def test_a_report_with_cycle_paired_ratios_is_judged_from_them(tmp_path):
    # per-round medians alike (a tie from them), cycle-paired ratios 1% faster in every round
    medians = {"greedy": [1.0] * 8, "rl": [1.0] * 8, "greedy again": [1.0] * 8}
    workload = {"rl_vs_best": {"verdict": "win", "ratio": 1.01, "baseline": "greedy",
                               "same_graph": False},
                "control": {"verdict": "tie"}, "round_medians_ms": medians,
                "round_ratios": {"rl_vs_best": [1.01] * 8, "control": [0.99] * 8}}
    path = tmp_path / "s0.json"
    path.write_text(json.dumps({"compiles": 1, "workloads": {"a": workload}}))
    summary = summary_module.summarise(summary_module.load([str(path)]))
    assert summary["workloads"]["a"]["reports"]["s0"]["verdict"] == "win"
    assert summary["workloads"]["a"]["reports"]["s0"]["ratio"] == pytest.approx(1.01)
    assert summary["target"]["s0"]["false_controls"] == 1
    assert (summary["control_lean"]["a"]["above"], summary["control_lean"]["a"]["of"]) == (0, 8)


def test_the_verdicts_against_tasos_sum_are_counted_as_recorded(tmp_path):
    r = report({"a": "tie", "b": "tie"})
    r["workloads"]["a"]["rl_vs_taso"] = {"verdict": "win", "ratio": 1.16}
    path = tmp_path / "s0.json"
    path.write_text(json.dumps(r))
    summary = summary_module.summarise(summary_module.load([str(path)]))
    assert summary["workloads"]["a"]["vs_taso"] == {"win": 1, "tie": 0, "loss": 0}
    assert summary["workloads"]["b"]["vs_taso"] == {"win": 0, "tie": 0, "loss": 0}
    assert "RL vs TASO's sum, as recorded (win / tie / loss): a 1 / 0 / 0" in \
        summary_module.table(summary, ["s0"])
