"""The same figures before and after the execution plan (``tempo/plan``): two trees, interleaved runs.

Runs each benchmark of the check in the tree before the plan layer (``--before``,
a worktree of ``68abb6b^``) and in this tree, alternately, ``--rounds`` times,
every library at one thread, and compares what each reports:

- ``compile``: ``benchmarks/compile_examples.py`` (the examples' programs and
  the Llama decoding program: compile wall and process CPU seconds, and the
  process CPU seconds of the stages ``STAGES``: ``plan`` and ``codegen`` are
  the plan layer's, which the tree before it did at the first run);
- ``rl_train``: ``benchmarks/rl_train.py --clock cpu`` on the Tempo systems
  both trees have (``--envs 64``, 5 iterations; every timing the worker's
  process CPU seconds: compile, first iteration, steady iteration) and the
  launches per iteration;
- ``decode``: ``benchmarks/decode.py --quick`` (Tempo's process CPU
  milliseconds between tokens and launches per token, each batch, attention
  and length; the compile part's wall seconds per depth);
- ``memory``: ``benchmarks/memory.py --quick --steps 250 --ppo-steps 100``
  (bytes held, launches, seconds per iteration of its REINFORCE, PPO
  under a budget, recomputation and swap-plan runs).

Each figure's median over the rounds is reported for each tree with the ratio
after / before, and the whole table is written as JSON.

    git worktree add --detach ../wtpre 68abb6b^
    .venv/bin/python benchmarks/plan_no_change.py --before ../wtpre --rounds 3 \\
        --out docs/results/plan_no_change.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PJRT_NPROC": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
STAGES = ("validate", "fuse", "memory", "plan", "codegen")  # compile stages reported apart (0: none such)
BENCHMARKS = {
    "compile": lambda out: [str(ROOT / "benchmarks" / "compile_examples.py"), "--out", f"{out}.json"],
    "rl_train": lambda out: ["benchmarks/rl_train.py", "--systems", "tempo-numpy", "tempo-torch", "tempo-jax",
                             "--envs", "64", "--iterations", "5", "--tempo-iterations", "5", "--clock", "cpu",
                             "--out", f"{out}.json"],
    "decode": lambda out: ["benchmarks/decode.py", "--quick", "--out", f"{out}.json"],
    "memory": lambda out: ["benchmarks/memory.py", "--quick", "--steps", "250", "--ppo-steps", "100",
                           "--out", f"{out}.json", "--ppo-out", f"{out}_ppo.json",
                           "--recompute-out", f"{out}_recompute.json", "--swap-plan-out", f"{out}_swap.json"],
}


def _load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def figures(bench: str, out: str) -> dict[str, float]:
    """The figures one run of ``bench`` wrote under ``out``, by name."""
    found: dict[str, float] = {}
    if bench == "compile":
        for row in (_load(f"{out}.json") or {}).get("rows", []):
            found[f"{row['program']} compile cpu s"] = row["cpu_s"]
            found[f"{row['program']} compile wall s"] = row["wall_s"]
            for stage in STAGES:
                found[f"{row['program']} {stage} stage cpu s"] = row["stages_cpu_s"].get(stage, 0.0)
    elif bench == "rl_train":
        for result in (_load(f"{out}.json") or {}).get("results", []):
            for system, r in result["systems"].items():
                for name in ("compile_s", "first_iteration_s", "iteration_s"):
                    found[f"{system} {name.replace('_s', '')} cpu s"] = r[name]
                found[f"{system} launches/iteration"] = statistics.median(r["launches_per_iteration"])
    elif bench == "decode":
        for r in (_load(f"{out}.json") or {}).get("results", []):
            if not r.get("system", "").startswith("tempo"):
                continue
            where = f"{r['system']} {r['attention']} batch {r['batch']}"
            for length, row in r.get("rows", {}).items():
                found[f"{where} length {length} cpu ms/token"] = row["cpu_ms"]
            found[f"{where} launches/token"] = r["launches_per_token"]
        for r in (_load(f"{out}_compile.json") or {}).get("results", []):
            found[f"llama {r['layers']} layers compile wall s"] = r["compile_s"]
    elif bench == "memory":
        for r in (_load(f"{out}.json") or {}).get("results", []):
            where = f"reinforce T={r['steps']} nstep={r['nstep']}"
            found[f"{where} store peak bytes"] = r["store_peak_bytes"]
            found[f"{where} launches"] = r["launches"]
            found[f"{where} s/iteration"] = r["seconds_per_iteration"]
        for r in (_load(f"{out}_ppo.json") or {}).get("results", []):
            if r.get("system") == "tempo" and "device_bytes" in r:
                found[f"ppo budget {r['obs']} device bytes"] = r["device_bytes"]
                found[f"ppo budget {r['obs']} host bytes"] = r["host_bytes"]
        for r in (_load(f"{out}_recompute.json") or {}).get("results", []):
            if r.get("fits"):
                where = f"recompute budget {r['budget']} {r['costs']}"
                found[f"{where} device bytes"] = r["device_bytes"]
                found[f"{where} s/iteration"] = r["seconds_per_iteration"]
        for r in (_load(f"{out}_swap.json") or {}).get("results", []):
            where = f"swap plan {r['plan']} {r['obs']}"
            found[f"{where} device bytes"] = r["device_bytes"]
            found[f"{where} cpu s"] = r["cpu_seconds"]
    return found


def run(bench: str, tree: Path, out: str) -> dict:
    """One run of ``bench`` in ``tree``: its figures, its process CPU seconds (children included) and
    wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(tree), **ONE_THREAD)
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([sys.executable, *BENCHMARKS[bench](out)], cwd=tree, env=env, capture_output=True,
                          text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"figures": figures(bench, out), "cpu_s": cpu, "wall_s": time.perf_counter() - started,
            "load": os.getloadavg()[0], "returncode": done.returncode,
            "error": done.stderr.strip().splitlines()[-1] if done.returncode else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the tree before the plan layer (a worktree of 68abb6b^)")
    parser.add_argument("--after", default=str(ROOT), help="the tree after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "plan_no_change.json"))
    args = parser.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    commits = {side: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                                    text=True).stdout.strip() for side, tree in trees.items()}
    runs: dict = {bench: {side: [] for side in trees} for bench in args.benchmarks}
    with tempfile.TemporaryDirectory() as work:
        for k in range(args.rounds):
            for bench in args.benchmarks:
                for side, tree in trees.items():
                    out = os.path.join(work, f"{side}_{bench}_{k}")
                    runs[bench][side].append(run(bench, tree, out))
                    r = runs[bench][side][-1]
                    print(f"round {k}: {bench:<8} {side:<6} {r['wall_s']:6.0f} s wall, {r['cpu_s']:6.0f} s CPU, "
                          f"load {r['load']:.1f}" + (f"  FAILED: {r['error']}" if r["error"] else ""), flush=True)
    rows = []
    for bench, sides in runs.items():
        names = [n for n in sides["after"][0]["figures"] if all(n in r["figures"] for s in sides.values() for r in s)]
        for name in names:
            before = [r["figures"][name] for r in sides["before"]]
            after = [r["figures"][name] for r in sides["after"]]
            b, a = statistics.median(before), statistics.median(after)
            rows.append({"benchmark": bench, "figure": name, "before": b, "after": a,
                         "ratio": a / b if b else None, "before_runs": before, "after_runs": after})
    load = [r["load"] for sides in runs.values() for rs in sides.values() for r in rs]
    print(f"\n{'benchmark':<9} {'figure':<52} {'before':>12} {'after':>12} {'after/before':>12}")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        print(f"{r['benchmark']:<9} {r['figure']:<52} {r['before']:>12.4g} {r['after']:>12.4g} {ratio:>12}")
    result = {"commits": commits, "rounds": args.rounds, "threads": 1, "load": [min(load), max(load)],
              "machine": f"{os.cpu_count()} cores, shared", "rows": rows,
              "runs": {bench: {side: [{k: v for k, v in r.items() if k != "figures"} for r in rs]
                               for side, rs in sides.items()} for bench, sides in runs.items()}}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
