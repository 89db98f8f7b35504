"""Dynamic termination (``tpo.end_when``) against padding: ``examples/reinforce.py`` on CartPole-v1.

Two programs train the same policy with the same seed: ``padded`` runs every
iteration's episodes to ``--steps`` (500) and masks the steps after each episode's
end; ``until`` (the example's ``--until``) ends iteration ``i``'s loop over ``t`` at
``T[i]``, the step after the batch's longest episode ends. Their returns are the
same iteration by iteration, bit for bit: the steps past the end are masked
out of every value, and every sum and product over the steps adds them in
step order (``tempo/transforms/step_order.py``), so the zeros the padded
program adds change nothing (``same`` counts the identical iterations before
the runs part, if they do). Each program is timed to its own first
iteration where the mean return of the last ``--episodes`` episodes reaches
``--target``, from the start of its process (its imports included) and from
the end of its imports (Python, NumPy, gymnasium and Tempo, the same modules
in both programs: the training, compilation included, as
``benchmarks/rl_learning.py`` times a run to its target). Each run is a fresh process at one thread (NumPy/BLAS, XLA's CPU client) and
stops there (the example's sink of counts raises ``StopRun``, as
``tpo.stop_when``'s check does), or after ``--iterations``.

``--batch`` sets the episodes per iteration. With ``--batch 1`` (one episode
per iteration, REINFORCE updating after each episode, ``--baseline episode``)
``T[i]`` is that episode's length, so ``until`` computes exactly the
environment's steps; with a batch, the steps of the episodes that end before
the batch's longest one are computed and masked.

Reported per program: iterations to the target, environment steps (each
episode's steps up to and including its end), computed steps (the rows the
learner reads: ``B * T[i]`` per iteration, ``B * 500`` padded) and their ratio,
and the wall and process-CPU seconds from the start of the process, and from
the end of its imports, to the iteration that reached the target
(compilation included): the least of
``--repeats`` runs of each program, alternated (every run is in the JSON).
``--iterations`` caps the runs; a program that does not reach the target is
reported over the iterations it ran. ``--seeds`` trains both programs once
per seed (policy initialisation, actions, environments) and adds up the
seeds' steps and seconds. ``--impl`` runs CartPole through
gymnasium (host code, which skips the episodes that have ended, so a padded
step costs less than a real one) or written as tensor ops (every step costs
the same).

Python's bytecode is cached as an install caches it, the same for both
programs (as ``benchmarks/rl_learning.py`` does): every worker writes and
reads its ``.pyc`` files under one temporary ``PYTHONPYCACHEPREFIX``
(``PYTHONDONTWRITEBYTECODE`` unset), and an untimed import of the example
fills it before the timed runs, so that no timed run compiles Python source.

    .venv/bin/python benchmarks/dynamic_termination.py --out docs/results/dynamic_termination_gymnasium
    .venv/bin/python benchmarks/dynamic_termination.py --impl tensor --out docs/results/dynamic_termination_tensor
    .venv/bin/python benchmarks/dynamic_termination.py --batch 1 --baseline episode --lr 0.005 --lr-decay 1 \
        --iterations 600 --seeds 0 1 2 3 4 5 6 7 8 9 --repeats 1 \
        --out docs/results/dynamic_termination_episodes_gymnasium
    .venv/bin/python benchmarks/dynamic_termination.py --batch 1 --baseline episode --lr 0.005 --lr-decay 1 \
        --iterations 600 --seeds 0 1 2 3 4 5 6 7 8 9 --repeats 1 --impl tensor \
        --out docs/results/dynamic_termination_episodes_tensor
    .venv/bin/python benchmarks/dynamic_termination.py --impl tensor --backend jax \
        --out docs/results/dynamic_termination_tensor_jax
    .venv/bin/python benchmarks/dynamic_termination.py --iterations 20 --out /tmp/dt   # a short run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tempo.files import write_json_atomic  # noqa: E402
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PJRT_NPROC": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}  # XLA's CPU client on one thread too

WORKER = """
import json, sys, time
sys.path.insert(0, {examples!r})
start_wall, start_cpu = time.perf_counter(), time.process_time()
import reinforce
from tempo.ir.ops import StopRun
from tempo.rl.training import ReturnReport
imported_wall, imported_cpu = time.perf_counter(), time.process_time()

window, target, reached = {window}, {target}, []
update, count = ReturnReport._update, reinforce._count


def update_and_check(report, value, point):  # the target's test, as reached() makes it
    update(report, value, point)
    if len(report.returns) >= window and sum(report.returns[-window:]) / window >= target:
        reached.append(len(report.returns) - 1)


def count_and_stop(steps, counts):  # a run ends once its target is reached and its counts are kept
    count(steps, counts)
    if reached and len(steps["env_steps"]) > reached[0]:
        raise StopRun({{"i": len(steps["env_steps"]) - 1}})


ReturnReport._update, reinforce._count = update_and_check, count_and_stop
result = reinforce.main(reinforce.Args(until={until}, **{settings!r}))
result["training_wall"] = [w - imported_wall for w in result["wall"]]
result["training_cpu"] = [c - imported_cpu for c in result["cpu"]]
result["wall"] = [w - start_wall for w in result["wall"]]
result["cpu"] = [c - start_cpu for c in result["cpu"]]
print("RESULT " + json.dumps(result))
"""


def worker_env(pycache: str) -> dict:
    """A worker's environment: one thread, this tree on the path, bytecode cached under ``pycache``."""
    env = {**os.environ, **THREADS, "PYTHONPATH": ROOT, "PYTHONPYCACHEPREFIX": pycache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def fill_bytecode_cache(pycache: str) -> None:
    """Import the example (tempo, gymnasium and what they import) once, untimed, writing their bytecode."""
    code = f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'examples')!r}); import reinforce"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=worker_env(pycache))


def run(until: bool, iterations: int, args: argparse.Namespace, seed: int) -> dict:
    """One training run in a fresh process at one thread, stopped once it reaches the target; its
    per-iteration record."""
    settings = {"iterations": iterations, "batch": args.batch, "seed": seed, "impl": args.impl,
                "baseline": args.baseline, "lr": args.lr, "lr_decay": args.lr_decay, "backend": args.backend}
    code = WORKER.format(examples=os.path.join(ROOT, "examples"), until=until, settings=settings,
                         window=-(-args.episodes // args.batch), target=args.target)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=args.timeout, cwd=ROOT,
                          env=worker_env(args.pycache))
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the {'until' if until else 'padded'} run failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def reached(result: dict, target: float, window: int) -> int | None:
    """The first iteration at which the mean return of the last ``window`` iterations is at least
    ``target`` (None: none)."""
    returns = result["returns"]
    return next((k for k in range(window - 1, len(returns)) if np.mean(returns[k - window + 1:k + 1]) >= target),
                None)


TIMES = ("wall_s", "cpu_s", "training_wall_s", "training_cpu_s")  # from the process's start, from the imports' end


def summary(result: dict, upto: int) -> dict:
    """The record of iterations ``0..upto``."""
    env_steps, computed = sum(result["env_steps"][:upto + 1]), sum(result["computed_steps"][:upto + 1])
    return {"iterations": upto + 1, "env_steps": env_steps, "computed_steps": computed,
            "computed_per_env_step": computed / env_steps, "wall_s": result["wall"][upto],
            "cpu_s": result["cpu"][upto], "training_wall_s": result["training_wall"][upto],
            "training_cpu_s": result["training_cpu"][upto], "final_return": result["returns"][upto]}


def measure(args: argparse.Namespace, seed: int, window: int) -> dict:
    """Both programs trained with ``seed``, each timed to its own first iteration at the target."""
    first, upto, hit, runs = {}, {}, {}, {"padded": [], "until": []}
    for repeat in range(args.repeats):
        for name in runs:
            result = run(name == "until", args.iterations, args, seed)
            if not repeat:
                first[name], hit[name] = result, reached(result, args.target, window)
                upto[name] = hit[name] if hit[name] is not None else len(result["returns"]) - 1
            runs[name].append(summary(result, upto[name]))
    rows = {name: {**done[0], "reached_target": hit[name] is not None,
                   **{key: min(r[key] for r in done) for key in TIMES}} for name, done in runs.items()}
    pairs = list(zip(first["padded"]["returns"], first["until"]["returns"]))
    same = next((k for k, (p, u) in enumerate(pairs) if p != u), len(pairs))
    return {"seed": seed, "identical_iterations": same, "programs": rows, "runs": runs,
            "returns": {name: first[name]["returns"][:upto[name] + 1] for name in runs}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40, help="the iterations the first run of each program "
                        "takes")
    parser.add_argument("--batch", type=int, default=32, help="episodes per iteration")
    parser.add_argument("--baseline", default="step", choices=("step", "episode"),
                        help="the example's --baseline: advantages standardized per step over the batch, or over "
                        "all of the batch's steps (one episode per iteration)")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--lr-decay", type=float, default=0.995, help="learning rate multiplier per iteration")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="a training run of each program per seed")
    parser.add_argument("--impl", default="gymnasium", choices=("gymnasium", "tensor"),
                        help="CartPole through gymnasium (host code) or written as tensor ops")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "torch", "jax"), help="the backend both "
                        "programs run on")
    parser.add_argument("--target", type=float, default=475.0, help="mean return to reach")
    parser.add_argument("--episodes", type=int, default=32, help="the target is the mean return of the last "
                        "ceil(episodes / batch) iterations' episodes")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each program per seed, alternated; the "
                        "least wall and CPU seconds are reported")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a run may take")
    parser.add_argument("--out", default="dynamic_termination", help="writes <out>.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as pycache:
        args.pycache = pycache
        fill_bytecode_cache(pycache)
        measure_all(args)


def measure_all(args: argparse.Namespace) -> None:
    """Both programs for every seed: the table, and ``<out>.json``."""
    load = os.getloadavg()[0]
    window = -(-args.episodes // args.batch)
    print(f"REINFORCE CartPole-v1 ({args.impl}), batch {args.batch}, one thread, load {load:.1f}: time to a mean "
          f"return of {args.target:g} over the last {window * args.batch} episodes")
    print(f"{'seed':>4} {'program':8} {'iters':>5} {'reached':>7} {'env steps':>10} {'computed':>10} {'ratio':>6} "
          f"{'wall s':>8} {'cpu s':>8} {'same':>5}")
    seeds = []
    for seed in args.seeds:
        seeds.append(measure(args, seed, window))
        for name, row in seeds[-1]["programs"].items():
            print(f"{seed:4d} {name:8} {row['iterations']:5d} {str(row['reached_target']):>7} "
                  f"{row['env_steps']:10d} {row['computed_steps']:10d} {row['computed_per_env_step']:6.2f} "
                  f"{row['wall_s']:8.1f} {row['cpu_s']:8.1f} {seeds[-1]['identical_iterations']:5d}")
    totals = {name: {key: sum(m["programs"][name][key] for m in seeds)
                     for key in ("iterations", "env_steps", "computed_steps", *TIMES, "reached_target")}
              for name in ("padded", "until")}
    for name, total in totals.items():
        total["computed_per_env_step"] = total["computed_steps"] / total["env_steps"]
        print(f"{'all':>4} {name:8} {total['iterations']:5d} {total['reached_target']:7d} {total['env_steps']:10d} "
              f"{total['computed_steps']:10d} {total['computed_per_env_step']:6.2f} {total['wall_s']:8.1f} "
              f"{total['cpu_s']:8.1f}")
    speedup = {key[:-2]: totals["padded"][key] / totals["until"][key] for key in TIMES}
    print(f"padded / until, from the process's start: wall {speedup['wall']:.2f}x, cpu {speedup['cpu']:.2f}x; "
          f"from the imports' end (training, compilation included): wall {speedup['training_wall']:.2f}x, cpu "
          f"{speedup['training_cpu']:.2f}x ('same': the iterations whose returns are identical before the programs "
          f"part)")
    settings = {k: v for k, v in vars(args).items() if k != "pycache"}
    record = {"settings": settings, "bytecode": "cached (PYTHONPYCACHEPREFIX, filled before the timed runs)",
              "load_average": load, "load_average_end": os.getloadavg()[0],
              "totals": totals, "speedup": speedup, "seeds": seeds, "date": time.strftime("%Y-%m-%d")}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out + ".json", record)
    print(f"wrote {args.out}.json")

if __name__ == "__main__":
    main()
