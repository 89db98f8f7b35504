"""`tempo superopt` over ONNX's own backend tests: crashes, wrong outputs, checker failures,
budget overruns and rewritten models per agent, with the rewritten models' speed-ups.

The node tests are generated from the installed onnx package's case generators; the
shipped models are those under its ``backend/test/data`` (``simple``, ``pytorch-*``,
``light``). Prints a table and writes JSON:

    python benchmarks/superopt/onnx_conformance.py --agents greedy taso eqsat rl \
        --out docs/results/superopt/onnx_conformance.json

The verdicts go to ``benchmarks/results/superopt/NAME.partial.json`` (NAME: OUT's stem; that
folder is not tracked) as they are made, every 20 cases and at the end of each row;
``--resume`` keeps the verdicts found there and runs only the other cases, so a run that is
stopped loses at most 20 cases.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from tempo.files import write_json_atomic
from tempo.superopt.onnx_conformance import Verdict, check, data_cases, node_cases

STATUSES = ("crash", "wrong", "checker", "overrun")
PARTIAL = Path("benchmarks/results/superopt")


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", nargs="+", default=["greedy"])
    p.add_argument("--node-budget", type=float, default=2.0, help="seconds per node test")
    p.add_argument("--model-budget", type=float, default=30.0, help="seconds per shipped model")
    p.add_argument("--suites", nargs="+", default=["node", "models"], choices=["node", "models"],
                   help="the node tests, the shipped models, or both")
    p.add_argument("--step", type=int, default=1, help="every STEP-th node test (1: all)")
    p.add_argument("--out", default="docs/results/superopt/onnx_conformance.json")
    p.add_argument("--resume", action="store_true",
                   help="keep the saved verdicts (NAME.partial.json) and run only the other cases")
    return p.parse_args()


def _summary(verdicts: list) -> dict:
    rewritten = [v for v in verdicts if v.rewritten and v.status == "ok"]
    speedups = [v.speedup for v in rewritten]
    return {
        "cases": len(verdicts),
        **{s: sum(v.status == s for v in verdicts) for s in STATUSES},
        "rewritten": len(rewritten),
        "geomean_speedup": float(np.exp(np.mean(np.log(speedups)))) if speedups else None,
        "max_speedup": max(speedups, default=None),
        "max_seconds": max((v.seconds for v in verdicts), default=0.0),
        "bad": [{"name": v.name, "status": v.status, "detail": v.detail[-400:]}
                for v in verdicts if v.status != "ok"],
        "speedups": {v.name: round(v.speedup, 4) for v in rewritten},
    }


def main() -> None:
    args = _args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = Path(args.out)
    partial = PARTIAL / f"{out.stem}.partial.json"
    partial.parent.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(partial.read_text()) if args.resume and partial.exists() else {}
    if saved and saved.get("commit") != commit:
        print(f"note: {partial} holds verdicts of commit {saved.get('commit')}, this is {commit}",
              file=sys.stderr)
    progress = {"commit": commit, "rows": saved.get("rows", {})}
    rows = {}
    for agent in args.agents:
        for key, suite, cases, budget in (
                ("node", "node tests", node_cases(), args.node_budget),
                ("models", "shipped models", data_cases(), args.model_budget)):
            if key not in args.suites:
                continue
            if suite == "node tests" and args.step > 1:
                cases = (c for k, c in enumerate(cases) if k % args.step == 0)
            label = f"{agent} / {suite}"
            verdicts, clock = _run_row(label, agent, cases, budget, progress, partial)
            rows[label] = {**_summary(verdicts), "budget_s": budget, **clock}
            _print_row(label, rows[label])
    write_json_atomic(out, {"commit": commit, "onnx": onnx.__version__,
                            "machine": platform.processor() or platform.machine(),
                            "cpus": os.cpu_count(), "rows": rows})
    print(f"wrote {out}")


def _run_row(label: str, agent: str, cases, budget: float, progress: dict,
             partial: Path) -> tuple[list, dict]:
    """The verdicts of one agent on one suite, those already in ``progress`` kept, saved to
    ``partial`` as they are made; with the wall, process-CPU and load of the row's new runs."""
    row = progress["rows"].setdefault(label, {"budget_s": budget, "verdicts": [], "wall_s": 0.0,
                                              "cpu_s": 0.0, "load": []})
    done = {v["name"]: Verdict(**v) for v in row["verdicts"]}
    verdicts = []
    clock = {"wall": time.perf_counter(), "cpu": time.process_time()}
    row["load"].append(os.getloadavg()[0])
    for k, case in enumerate(cases):
        if case.name not in done:
            done[case.name] = check(case, agent, budget)
            row["verdicts"].append(dataclasses.asdict(done[case.name]))
            if len(row["verdicts"]) % 20 == 0:
                _save(row, clock, progress, partial)
                print(f"{label}: {k + 1} cases", file=sys.stderr, flush=True)
        verdicts.append(done[case.name])
    row["load"].append(os.getloadavg()[0])
    _save(row, clock, progress, partial)
    return verdicts, {"wall_s": row["wall_s"], "cpu_s": row["cpu_s"], "load": row["load"]}


def _save(row: dict, clock: dict, progress: dict, partial: Path) -> None:
    """Adds the wall and process-CPU time since ``clock`` to the row, restarts ``clock`` and
    writes the verdicts so far."""
    now = {"wall": time.perf_counter(), "cpu": time.process_time()}
    row["wall_s"] += now["wall"] - clock["wall"]
    row["cpu_s"] += now["cpu"] - clock["cpu"]
    clock.update(now)
    write_json_atomic(partial, progress)


def _print_row(label: str, r: dict) -> None:
    geo = f"{r['geomean_speedup']:.3f}" if r["geomean_speedup"] else "-"
    top = f"{r['max_speedup']:.3f}" if r["max_speedup"] else "-"
    print(f"| {label} | {r['cases']} | {r['crash']} | {r['wrong']} | {r['checker']} | "
          f"{r['overrun']} | {r['rewritten']} | {geo} | {top} |", flush=True)


if __name__ == "__main__":
    main()
