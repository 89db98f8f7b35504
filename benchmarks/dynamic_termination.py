"""Dynamic termination (``tpo.end_when``) against padding: ``examples/reinforce.py`` on CartPole-v1.

Two programs train the same policy with the same seed: ``padded`` runs every
iteration's episodes to ``--steps`` (500) and masks the steps after each episode's
end; ``until`` (the example's ``--until``) ends iteration ``i``'s loop over ``t`` at
``T[i]``, the step after the batch's longest episode ends. Their returns are the
same iteration by iteration (the steps past the end are masked out of every
value either way), so the iteration where the mean return first reaches
``--target`` is the same; each run is a fresh process at one thread (NumPy/BLAS):
the first ``until`` run takes ``--iterations``, the others stop at that iteration.

Reported per program: iterations to the target, environment steps (each
episode's steps up to and including its end), computed steps (the rows the
learner reads: ``B * T[i]`` per iteration, ``B * 500`` padded) and their ratio,
and the wall and process-CPU seconds from the start of the process's run
(compilation included) to the iteration that reached the target: the least
of ``--repeats`` runs of each program, alternated (every run is in the JSON).
``--iterations`` caps the ``until`` run; if it does not reach the target, the
table compares both programs over the iterations it ran. ``--impl`` runs
CartPole through gymnasium (host code, which skips the episodes that have
ended, so a padded step costs less than a real one) or written as tensor
ops (every step costs the same).

    .venv/bin/python benchmarks/dynamic_termination.py --out docs/results/dynamic_termination_gymnasium
    .venv/bin/python benchmarks/dynamic_termination.py --impl tensor --out docs/results/dynamic_termination_tensor
    .venv/bin/python benchmarks/dynamic_termination.py --iterations 20 --out /tmp/dt   # a short run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tempo.files import write_json_atomic  # noqa: E402
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

WORKER = """
import json, sys, time
sys.path.insert(0, {examples!r})
start_wall, start_cpu = time.perf_counter(), time.process_time()
import reinforce
result = reinforce.main(reinforce.Args(iterations={iterations}, batch={batch}, seed={seed}, impl={impl!r},
                                       until={until}))
result["wall"] = [w - start_wall for w in result["wall"]]
result["cpu"] = [c - start_cpu for c in result["cpu"]]
print("RESULT " + json.dumps(result))
"""


def run(until: bool, iterations: int, batch: int, seed: int, impl: str, timeout: float) -> dict:
    """One training run in a fresh process at one thread; its per-iteration record."""
    code = WORKER.format(examples=os.path.join(ROOT, "examples"), iterations=iterations, batch=batch, seed=seed,
                         impl=impl, until=until)
    env = {**os.environ, **THREADS, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the {'until' if until else 'padded'} run failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def reached(result: dict, target: float) -> int | None:
    """The first iteration whose mean return is at least ``target`` (None: none)."""
    return next((k for k, r in enumerate(result["returns"]) if r >= target), None)


def summary(result: dict, upto: int) -> dict:
    """The record of iterations ``0..upto``."""
    env_steps, computed = sum(result["env_steps"][:upto + 1]), sum(result["computed_steps"][:upto + 1])
    return {"iterations": upto + 1, "env_steps": env_steps, "computed_steps": computed,
            "computed_per_env_step": computed / env_steps, "wall_s": result["wall"][upto],
            "cpu_s": result["cpu"][upto], "final_return": result["returns"][upto]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40, help="the iterations the first until run takes")
    parser.add_argument("--batch", type=int, default=32, help="episodes per iteration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--impl", default="gymnasium", choices=("gymnasium", "tensor"),
                        help="CartPole through gymnasium (host code) or written as tensor ops")
    parser.add_argument("--target", type=float, default=475.0, help="mean return per iteration to reach")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each program, alternated; the least "
                        "wall and CPU seconds are reported")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a run may take")
    parser.add_argument("--out", default="dynamic_termination", help="writes <out>.json")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    until = run(True, args.iterations, args.batch, args.seed, args.impl, args.timeout)
    hit = reached(until, args.target)
    upto = hit if hit is not None else len(until["returns"]) - 1
    runs = {"padded": [], "until": [summary(until, upto)]}
    for repeat in range(args.repeats):
        padded = run(False, upto + 1, args.batch, args.seed, args.impl, args.timeout)
        runs["padded"].append(summary(padded, upto))
        if repeat:
            runs["until"].append(summary(run(True, upto + 1, args.batch, args.seed, args.impl, args.timeout), upto))
    same = padded["returns"] == until["returns"][:upto + 1]
    rows = {name: {**done[0], "wall_s": min(r["wall_s"] for r in done), "cpu_s": min(r["cpu_s"] for r in done)}
            for name, done in runs.items()}
    print(f"REINFORCE CartPole-v1 ({args.impl}), batch {args.batch}, seed {args.seed}, one thread, load {load:.1f}: "
          f"{'reached' if hit is not None else 'did not reach'} a mean return of {args.target:g} "
          f"at iteration {upto}; returns identical per iteration: {same}")
    print(f"{'program':8} {'iters':>5} {'env steps':>10} {'computed':>10} {'ratio':>6} {'wall s':>8} {'cpu s':>8}")
    for name, row in rows.items():
        print(f"{name:8} {row['iterations']:5d} {row['env_steps']:10d} {row['computed_steps']:10d} "
              f"{row['computed_per_env_step']:6.2f} {row['wall_s']:8.1f} {row['cpu_s']:8.1f}")
    speedup = {"wall": rows["padded"]["wall_s"] / rows["until"]["wall_s"],
               "cpu": rows["padded"]["cpu_s"] / rows["until"]["cpu_s"]}
    print(f"padded / until: wall {speedup['wall']:.2f}x, cpu {speedup['cpu']:.2f}x")
    record = {"settings": vars(args), "load_average": load, "reached_target": hit is not None,
              "iteration": upto, "returns_identical": same, "programs": rows, "runs": runs, "speedup": speedup,
              "returns": until["returns"][:upto + 1], "date": time.strftime("%Y-%m-%d")}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out + ".json", record)
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
