"""The RL agent against the best baseline across several reports of ``speedups.py``.

Each report (one seed of one run) gives a verdict per workload; the agent's
target is, in every single report, no loss on any workload and a win on at
least three. This prints one row per workload with each report's
verdict and its ratio, the counts per workload, and whether each report
meets the target; the same goes to ``--out`` as JSON.

Each verdict is taken again by :func:`tempo.superopt.stats.paired_verdict`
from the report's per-round cycle-paired ratios (``round_ratios``; a report
that records only per-round medians, from those), per compile pair where the
report's timing took several compiles, so reports written with other timing
settings read alike; ``--as-recorded`` keeps the verdicts they recorded.
Each report's A/A control (greedy's graph against itself) is judged the same
way and counted when it is not a tie; and, pooled per workload and over all
reports, the control's compile pairs in which it came out faster than
greedy's graph (the sign test's p-value: a timing without bias puts about
half there).

    .venv/bin/python benchmarks/superopt/speedups.py --seed 1 2 3 --jobs 2 \\
        --out benchmarks/results/superopt/cpu.json        # writes cpu_s1.json, cpu_s2.json, ...
    .venv/bin/python benchmarks/superopt/summary.py benchmarks/results/superopt/cpu_s*.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from tempo.files import write_bytes_atomic
from tempo.superopt.latency import Latency
from tempo.superopt.stats import compile_pair_medians, paired_verdict, ratio_verdict, sign_test_p

VERDICTS = ("win", "tie", "loss")
WINS_NEEDED = 3


def load(paths: list[str]) -> dict[str, dict]:
    """Each report by a short name: its file name without the directory and ``.json``."""
    reports = {}
    for path in paths:
        with open(path) as f:
            reports[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return reports


def rejudge(report: dict, workload: dict, reference: str, challenger: str,
            pair: str) -> tuple[str, float]:
    """The verdict and ratio of ``challenger`` against ``reference``: from the report's
    per-round cycle-paired ratios of ``pair`` (``rl_vs_best`` or ``control``), or in a report
    that records only per-round medians, from those."""
    if "round_ratios" in workload:
        v = ratio_verdict(np.asarray(workload["round_ratios"][pair]), report.get("compiles", 1))
        return v.outcome, v.ratio
    medians = workload["round_medians_ms"]
    rounds = len(medians[reference])
    v = paired_verdict(Latency(tuple(medians[reference])), Latency(tuple(medians[challenger])),
                       rounds, report.get("compiles", 1))
    return v.outcome, v.ratio


def rl_verdict(report: dict, workload: dict, as_recorded: bool) -> tuple[str, float]:
    """RL against the best baseline: as recorded (also for a report without per-round medians,
    and a tie for the same graph), or judged again."""
    v = workload["rl_vs_best"]
    if as_recorded or v.get("same_graph") or "round_medians_ms" not in workload:
        return v["verdict"], v["ratio"]
    return rejudge(report, workload, v["baseline"], "rl", "rl_vs_best")


def control_pairs(report: dict, workload: dict) -> np.ndarray:
    """The A/A control's ratios (greedy's graph / its second name), one per compile pair (per
    round for a report timed with one compile); none for a report without per-round medians."""
    if "round_ratios" in workload:
        ratios = np.asarray(workload["round_ratios"]["control"])
    else:
        medians = workload.get("round_medians_ms", {})
        if "greedy again" not in medians:
            return np.empty(0)
        ratios = np.asarray(medians["greedy"]) / np.asarray(medians["greedy again"])
    compiles = report.get("compiles", 1)
    return compile_pair_medians(ratios, compiles) if compiles > 1 else ratios


def lean(ratios: list[np.ndarray]) -> dict:
    """How many of the ratios (not exactly 1) lie above 1, of how many, and the sign test's p."""
    pooled = np.concatenate(ratios) if ratios else np.empty(0)
    above, n = int(np.sum(pooled > 1.0)), int(np.sum(pooled != 1.0))
    return {"above": above, "of": n, "p": sign_test_p(above, n)}


def summarise(reports: dict[str, dict], as_recorded: bool = False) -> dict:
    """Per workload: each report's verdict and ratio, and the counts (against TASO's sum too,
    as recorded, in the reports that time it); per report: the target and the A/A controls that
    were not ties; per workload and over all: the controls' lean."""
    workloads: dict[str, dict] = {}
    target = {}
    pairs: dict[str, list[np.ndarray]] = {}
    for name, report in reports.items():
        verdicts, controls = [], 0
        for w, r in report["workloads"].items():
            row = workloads.setdefault(w, {"reports": {}, **{v: 0 for v in VERDICTS},
                                           "vs_taso": {v: 0 for v in VERDICTS}})
            verdict, ratio = rl_verdict(report, r, as_recorded)
            row["reports"][name] = {"verdict": verdict, "ratio": ratio,
                                    "baseline": r["rl_vs_best"]["baseline"]}
            row[verdict] += 1
            if "rl_vs_taso" in r:
                row["vs_taso"][r["rl_vs_taso"]["verdict"]] += 1
            verdicts.append(verdict)
            pairs.setdefault(w, []).append(control_pairs(report, r))
            if "control" in r:
                control = r["control"]["verdict"] if as_recorded or "round_medians_ms" not in r \
                    else rejudge(report, r, "greedy", "greedy again", "control")[0]
                controls += control != "tie"
        target[name] = {**{v: verdicts.count(v) for v in VERDICTS},
                        "met": verdicts.count("loss") == 0 and verdicts.count("win") >= WINS_NEEDED,
                        "false_controls": controls}
    controls = {w: lean(p) for w, p in pairs.items()}
    controls["all"] = lean([r for p in pairs.values() for r in p])
    return {"workloads": workloads, "target": target, "control_lean": controls}


def table(summary: dict, names: list[str]) -> str:
    """A markdown table: verdict (ratio) per workload and report, the counts, then the target."""
    lines = ["| workload | " + " | ".join(names) + " | win | tie | loss |",
             "|---|" + "---|" * (len(names) + 3)]
    for w, row in summary["workloads"].items():
        cells = [f"{row['reports'][n]['verdict']} ({row['reports'][n]['ratio']:.3f})"
                 if n in row["reports"] else "-" for n in names]
        lines.append(f"| {w} | " + " | ".join(cells) + " | "
                     + " | ".join(str(row[v]) for v in VERDICTS) + " |")
    lines.append("")
    for n, t in summary["target"].items():
        lines.append(f"{n}: {t['win']} win, {t['tie']} tie, {t['loss']} loss; target "
                     f"(no loss, >= {WINS_NEEDED} wins) {'met' if t['met'] else 'not met'}; "
                     f"A/A controls not a tie: {t['false_controls']}")
    lines.append("")
    taso = [f"{w} " + " / ".join(str(row["vs_taso"][v]) for v in VERDICTS)
            for w, row in summary["workloads"].items() if sum(row["vs_taso"].values())]
    if taso:
        lines += ["RL vs TASO's sum, as recorded (win / tie / loss): " + "; ".join(taso), ""]
    lines.append("A/A control faster than greedy's graph, compile pairs: " + "; ".join(
        f"{w} {c['above']} of {c['of']} (p={c['p']:.2g})"
        for w, c in summary["control_lean"].items() if c["of"]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+", help="JSON reports of benchmarks/superopt/speedups.py")
    p.add_argument("--out", default="benchmarks/results/superopt/summary.json")
    p.add_argument("--as-recorded", action="store_true",
                   help="the verdicts the reports recorded, not judged again")
    ns = p.parse_args()
    reports = load(ns.reports)
    summary = summarise(reports, ns.as_recorded)
    print(table(summary, list(reports)))
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    write_bytes_atomic(ns.out, json.dumps(summary, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
