"""The RL agent against the best baseline across several reports of ``benchmarks/superopt.py``.

Each report (one seed of one run) gives a verdict per workload; the target of
X-RLflow's issue is, in every single report, no loss on any workload and a
win on at least three. This prints one row per workload with each report's
verdict and its ratio, the counts per workload, and whether each report
meets the target; the same goes to ``--out`` as JSON.

    .venv/bin/python benchmarks/superopt_summary.py docs/results/superopt/cpu_s14_s*.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tempo.files import write_bytes_atomic

VERDICTS = ("win", "tie", "loss")
WINS_NEEDED = 3


def load(paths: list[str]) -> dict[str, dict]:
    """Each report by a short name: its file name without the directory and ``.json``."""
    reports = {}
    for path in paths:
        with open(path) as f:
            reports[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return reports


def summarise(reports: dict[str, dict]) -> dict:
    """Per workload: each report's verdict and ratio, and the counts; per report: the target."""
    workloads: dict[str, dict] = {}
    for name, report in reports.items():
        for w, r in report["workloads"].items():
            row = workloads.setdefault(w, {"reports": {}, **{v: 0 for v in VERDICTS}})
            v = r["rl_vs_best"]
            row["reports"][name] = {"verdict": v["verdict"], "ratio": v["ratio"],
                                    "baseline": v["baseline"]}
            row[v["verdict"]] += 1
    target = {}
    for name, report in reports.items():
        verdicts = [r["rl_vs_best"]["verdict"] for r in report["workloads"].values()]
        target[name] = {**{v: verdicts.count(v) for v in VERDICTS},
                        "met": verdicts.count("loss") == 0 and verdicts.count("win") >= WINS_NEEDED}
    return {"workloads": workloads, "target": target}


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
                     f"(no loss, >= {WINS_NEEDED} wins) {'met' if t['met'] else 'not met'}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+", help="JSON reports of benchmarks/superopt.py")
    p.add_argument("--out", default="benchmarks/results/superopt_summary.json")
    ns = p.parse_args()
    reports = load(ns.reports)
    summary = summarise(reports)
    print(table(summary, list(reports)))
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    write_bytes_atomic(ns.out, json.dumps(summary, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
