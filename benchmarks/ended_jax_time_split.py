"""Where the time of ``examples/reinforce.py`` on JAX goes, padded and ended at run time (``--until``).

Both programs run their loop over ``i`` as one device program (docs/api.md, "Dims that end at run
time"). Each run is a fresh process at one thread (NumPy/BLAS, XLA's CPU client) training
CartPole-v1 as tensor ops, batch 32, seed 0, for ``--iterations`` iterations (26: where both reach a
mean return of 475 in ``benchmarks/dynamic_termination.py``), or with ``--batch 1`` one episode per
iteration as that benchmark trains it (``--baseline episode --lr 0.005 --lr-decay 1``, with
``TEMPO_STEP_ORDER=exact``: both programs add the steps in order and train the same returns), with
Monte-Carlo returns or, with ``--nstep 8``, 8-step returns and a loss averaged over the batch's steps
(whose gradient divides by ``B * T[i]`` in the until program: the two programs train apart). Its process-CPU seconds are split into:

- ``import``: importing the example (tempo, JAX, gymnasium), from the start of the process;
- ``device compile``: tracing, lowering and XLA's compilation of the device program of the loop
  over ``i`` (``LoopProgram.compile_seconds``);
- ``other first``: the rest up to the first iteration's report (building the program, scheduling,
  the small programs of the statements outside the loop, the first launch);
- ``later``: the other iterations (their launches and reports), the work that scales with the steps.

The least of ``--repeats`` runs of each program (alternated) is reported per column, with the
total. Writes ``<out>.json``.

    .venv/bin/python benchmarks/ended_jax_time_split.py --out docs/results/ended_jax_time_split
    .venv/bin/python benchmarks/ended_jax_time_split.py --nstep 8 --out docs/results/ended_jax_time_split_nstep8
    .venv/bin/python benchmarks/ended_jax_time_split.py --batch 1 --iterations 179 \
        --out docs/results/ended_jax_time_split_episodes
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tempo.files import write_json_atomic  # noqa: E402

THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PJRT_NPROC": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
COLUMNS = ("import", "device compile", "other first", "later", "total")

WORKER = """
import gc, json, sys, time
start = time.process_time()
sys.path.insert(0, {examples!r})
import reinforce
from tempo.runtime.backends.jax_loops import LoopProgram
imported = time.process_time()
result = reinforce.main(reinforce.Args(until={until}, iterations={iterations}, impl="tensor", backend="jax",
                                       nstep={nstep}, **{settings!r}))
compiled = sum(o.compile_seconds[1] for o in gc.get_objects() if isinstance(o, LoopProgram))
first, last = result["cpu"][0] - start, result["cpu"][-1] - start
print("RESULT " + json.dumps({{"import": imported - start, "device compile": compiled,
                              "other first": first - (imported - start) - compiled, "later": last - first,
                              "total": last, "returns": result["returns"]}}))
"""


def run(until: bool, iterations: int, nstep: int, batch: int) -> dict:
    """One training run in a fresh process at one thread: its split of process-CPU seconds."""
    settings = {"batch": batch, "seed": 0}
    if batch == 1:  # one episode per iteration, as benchmarks/dynamic_termination.py trains it
        settings.update(baseline="episode", lr=0.005, lr_decay=1.0)
    code = WORKER.format(examples=os.path.join(ROOT, "examples"), until=until, iterations=iterations, nstep=nstep,
                         settings=settings)
    env = {**os.environ, **THREADS, "PYTHONPATH": ROOT}
    if batch == 1:
        env["TEMPO_STEP_ORDER"] = "exact"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the {'until' if until else 'padded'} run failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=26, help="training iterations per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each program, alternated")
    parser.add_argument("--nstep", type=int, default=0, help="n-step returns (the example's --nstep; 0: Monte-Carlo)")
    parser.add_argument("--batch", type=int, default=32, choices=(1, 32), help="episodes per iteration")
    parser.add_argument("--out", default="ended_jax_time_split", help="writes <out>.json")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs = {"padded": [], "until": []}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(run(name == "until", args.iterations, args.nstep, args.batch))
    least = {name: {c: min(r[c] for r in done) for c in COLUMNS} for name, done in runs.items()}
    same = all(r["returns"] == runs["padded"][0]["returns"] for done in runs.values() for r in done)
    print(f"REINFORCE CartPole-v1 (tensor, nstep {args.nstep}) on JAX, batch {args.batch}, {args.iterations} iterations, "
          f"one thread, load {load:.1f}-{os.getloadavg()[0]:.1f}: process-CPU seconds, least of {args.repeats} runs")
    print(f"{'program':8s}" + "".join(f"{c:>16s}" for c in COLUMNS))
    for name, row in least.items():
        print(f"{name:8s}" + "".join(f"{row[c]:16.2f}" for c in COLUMNS))
    print(f"same returns at every iteration in every run: {same}")
    write_json_atomic(args.out + ".json", {"settings": vars(args), "load_average": load,
                                           "load_average_end": os.getloadavg()[0], "least": least,
                                           "same_returns": same, "runs": runs})
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
