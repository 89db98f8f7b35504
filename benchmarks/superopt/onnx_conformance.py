"""`tempo superopt` over ONNX's own backend tests: crashes, wrong outputs, checker failures,
budget overruns and rewritten models per agent, with the rewritten models' speed-ups.

The node tests are generated from the installed onnx package's case generators; the
shipped models are those under its ``backend/test/data`` (``simple``, ``pytorch-*``,
``light``). Prints a table and writes JSON:

    python benchmarks/superopt/onnx_conformance.py --agents greedy taso eqsat rl \
        --out docs/results/superopt/onnx_conformance.json
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx

from tempo.superopt.onnx_conformance import check, data_cases, node_cases

STATUSES = ("crash", "wrong", "checker", "overrun")


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", nargs="+", default=["greedy"])
    p.add_argument("--node-budget", type=float, default=2.0, help="seconds per node test")
    p.add_argument("--model-budget", type=float, default=30.0, help="seconds per shipped model")
    p.add_argument("--suites", nargs="+", default=["node", "models"], choices=["node", "models"],
                   help="the node tests, the shipped models, or both")
    p.add_argument("--step", type=int, default=1, help="every STEP-th node test (1: all)")
    p.add_argument("--out", default="docs/results/superopt/onnx_conformance.json")
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
    rows = {}
    for agent in args.agents:
        for key, suite, cases, budget in (
                ("node", "node tests", node_cases(), args.node_budget),
                ("models", "shipped models", data_cases(), args.model_budget)):
            if key not in args.suites:
                continue
            if suite == "node tests" and args.step > 1:
                cases = (c for k, c in enumerate(cases) if k % args.step == 0)
            start = time.perf_counter()
            verdicts = [check(c, agent, budget) for c in cases]
            rows[f"{agent} / {suite}"] = {**_summary(verdicts), "budget_s": budget,
                                          "wall_s": time.perf_counter() - start}
            _print_row(f"{agent} / {suite}", rows[f"{agent} / {suite}"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": commit, "onnx": onnx.__version__,
                               "machine": platform.processor() or platform.machine(),
                               "rows": rows}, indent=1))
    print(f"wrote {out}")


def _print_row(label: str, r: dict) -> None:
    geo = f"{r['geomean_speedup']:.3f}" if r["geomean_speedup"] else "-"
    top = f"{r['max_speedup']:.3f}" if r["max_speedup"] else "-"
    print(f"| {label} | {r['cases']} | {r['crash']} | {r['wrong']} | {r['checker']} | "
          f"{r['overrun']} | {r['rewritten']} | {geo} | {top} |", flush=True)


if __name__ == "__main__":
    main()
