"""What step order costs (``tpo.Config(step_order=...)``): REINFORCE's iteration with and without the marks.

``examples/reinforce.py`` at ``benchmarks/rl_train.py``'s default point
(``tempo/Synthetic-v0`` as tensor ops, 512 environments, episodes of 250
steps, actor and critic MLPs of 2 hidden layers of 64), as two programs:
``fixed`` runs every iteration's episodes to 250 steps; ``until`` (the
example's ``--until``) ends the loop over ``t`` at run time, where every
episode has ended, which in this environment is the cap as well, so both
compute the same steps. Each runs under these settings, in a fresh process
at one thread:

- ``auto``: the default policy (NumPy: marked; torch and JAX: the fixed
  program unmarked, the until program marked);
- ``exact``: ``TEMPO_STEP_ORDER=exact``, marked everywhere;
- ``off``: ``TEMPO_PASSES_OFF=step_order``, never marked.

Reported per backend, program and setting: the ops marked to run in step
order (those of fused islands included), the process-CPU and wall seconds of
a steady-state iteration (each run's median over the iterations after the
first, marked as ``benchmarks/rl_train.py`` marks them), their median over
``--repeats`` runs (the settings alternated within each round) and the CPU
ratio to the program's unmarked setting, and the last iteration's mean
return. Prints a table and writes JSON with every run.

    .venv/bin/python benchmarks/step_order_cost.py --out docs/results/step_order_cost.json
    .venv/bin/python benchmarks/step_order_cost.py --quick --repeats 1 --iterations 2 --out /tmp/s.json  # a smoke test
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, ROOT)

from tempo.files import write_json_atomic  # noqa: E402

SETTINGS = {"auto": {}, "exact": {"TEMPO_STEP_ORDER": "exact"}, "off": {"TEMPO_PASSES_OFF": "step_order"}}
RUNS = {"numpy": [("fixed", "auto"), ("fixed", "off")],
        "torch": [("fixed", "auto"), ("fixed", "exact"), ("until", "auto"), ("until", "off")],
        "jax": [("fixed", "auto"), ("fixed", "exact"), ("until", "auto"), ("until", "off")]}


def marked(sdg) -> int:
    """The ops of ``sdg`` (and of its fused islands) marked to run in step order."""
    found = [s.op for node in sdg.nodes.values() for s in getattr(node.op, "steps", ())]
    found += [node.op for node in sdg.nodes.values()]
    return sum(bool(getattr(op, "ordered", False) or getattr(op, "ordered_rows", ())
                    or getattr(op, "ordered_inner", False)) for op in found)


def worker(spec: dict, out_path: str) -> None:
    """Train once as ``spec`` says (:func:`rl_train.measure`) and write what was measured to ``out_path``."""
    import time

    from rl_train import QUICK_POINT, Point, marking_clock, measure

    from tempo.api import stages

    lowered, lower = [], stages.lower
    stages.lower = lambda request: lowered.append(lower(request)) or lowered[-1]
    cpu_at: dict = {}
    time.perf_counter = marking_clock(time.perf_counter, time.process_time, cpu_at)
    point = QUICK_POINT if spec.get("quick") else Point()
    out = measure(f"tempo-{spec['backend']}", "reinforce", point, spec["iterations"], 0, cpu_at,
                  options={"until": spec["program"] == "until"})
    with open(out_path, "w") as f:
        json.dump({**spec, **out, "marked": marked(lowered[-1].sdg)}, f)


def run(spec: dict) -> dict:
    """``spec`` measured in a fresh process at one thread, under its setting's environment."""
    from rl_train import thread_env

    env = {**thread_env(1), "PYTHONPATH": ROOT, **SETTINGS[spec["setting"]]}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec), out], check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return {**json.load(f), "load": os.getloadavg()[0]}


def summary(runs: list[dict]) -> list[dict]:
    """One row per backend, program and setting: the medians over its runs, and the CPU ratio to the
    program's unmarked setting (``auto`` on torch and JAX's fixed program, else ``off``)."""
    rows = {}
    for r in runs:
        row = rows.setdefault((r["backend"], r["program"], r["setting"]), {
            "backend": r["backend"], "program": r["program"], "setting": r["setting"], "marked": r["marked"],
            "cpu": [], "wall": [], "return": r["returns"][-1]})
        row["cpu"].append(r["iteration_cpu_s"])
        row["wall"].append(r["iteration_s"])
    for row in rows.values():
        row["cpu_s"], row["wall_s"] = statistics.median(row["cpu"]), statistics.median(row["wall"])
    for (backend, program, setting), row in rows.items():
        base = next((b for (bb, bp, _), b in rows.items() if (bb, bp) == (backend, program) and not b["marked"]), None)
        row["cpu_ratio"] = row["cpu_s"] / base["cpu_s"] if base else None
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["numpy", "torch", "jax"], choices=list(RUNS))
    parser.add_argument("--iterations", type=int, default=8, help="iterations timed per run (one more runs)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each setting, alternated")
    parser.add_argument("--quick", action="store_true", help="rl_train's tiny point (8 steps, 4 environments)")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "step_order_cost.json"))
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker[0]), args.worker[1])
        return
    runs = []
    for repeat in range(args.repeats):
        for backend in args.backends:
            order = RUNS[backend][repeat % len(RUNS[backend]):] + RUNS[backend][:repeat % len(RUNS[backend])]
            for program, setting in order:
                runs.append(run({"backend": backend, "program": program, "setting": setting,
                                 "iterations": args.iterations, "quick": args.quick}))
                r = runs[-1]
                print(f"run {repeat + 1}/{args.repeats} {backend} {program} {setting}: {r['iteration_cpu_s']:.4f} CPU s/it "
                      f"(load {r['load']:.1f})", flush=True)
    rows = summary(runs)
    loads = [r["load"] for r in runs]
    print(f"\nREINFORCE, tempo/Synthetic-v0, one thread; medians of {args.repeats} runs; "
          f"load {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'backend':>8} {'program':>8} {'setting':>8} {'marked':>7} {'CPU s/it':>9} {'wall s/it':>10} "
          f"{'CPU ratio':>10} {'last return':>12}")
    for row in rows:
        ratio = f"{row['cpu_ratio']:.3f}" if row["cpu_ratio"] is not None else "-"
        print(f"{row['backend']:>8} {row['program']:>8} {row['setting']:>8} {row['marked']:>7} {row['cpu_s']:>9.4f} "
              f"{row['wall_s']:>10.4f} {ratio:>10} {row['return']:>12.4f}")
    write_json_atomic(args.out, {"threads": 1, "repeats": args.repeats, "load": [min(loads), max(loads)],
                                 "rows": rows, "runs": runs})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
