"""Device loops in a tiled program: launches and host work per iteration of a tiled n-step REINFORCE.

``examples/reinforce.py`` on ``tempo/Synthetic-v0`` (tensor environments),
``--nstep 8 --tiles 16`` (the learner in tiles of 16 steps, gradients
accumulated; 16 does not divide the default 200 steps, so the last tile is
partial), on the NumPy and JAX backends, each under these schedules:

- ``nested``: what the compiler chooses for tiles that free no large rows of
  acting's output while acting goes on (small observations): the loop over
  iterations holds acting's loop and the loops over tiles after it, and on
  JAX acting's loop runs as one device program per iteration;
- ``fused``: shift fusion's schedule (the tiles inside acting's loop, a few
  steps behind it), what the compiler chooses where the tiles free large rows
  while acting (``--obs-shape 3,64,64``); its loops run on the host;
- ``host tiles`` (JAX only): the nested loops with every loop over tiles kept
  on the host, as for a partial last tile (the planner takes no shape for a
  tile's), the baseline of ``nested`` where the tiles divide the steps
  (``--steps 192 --tiles 16``): there the loops over tiles run as device
  loops, nested with acting's loop in the loop over iterations, one device
  program for the whole run;
- ``host windows`` (JAX only, n-step returns): the nested loops with no read
  taken for a padded window (:func:`tempo.plan.device_loops._window`): n-step
  returns' windows ``r[t:min(t + n, T)]``, shorter at the end, keep their loop
  over steps, and so the loop over iterations, on the host; the baseline of
  ``nested`` where the tiles divide the steps (``--steps 192``), where the
  windows, padded with zeros, let the whole run be one device program.

Each run is a fresh process at one thread (NumPy's BLAS and XLA) and is
profiled (:meth:`tempo.api.compile.Program.profile`). The example runs
``--iterations`` + 1 iterations, the last left out of the timings (it does
not learn). Reported per run: the loops run as device programs, the kernel
and device-loop launches of the whole run per iteration (``launches/it``:
a schedule may run statements of every iteration outside the loop over
them) and per steady-state iteration of that loop (``in loop``), the host
microseconds the profile counts per such iteration, and the wall and process-CPU
seconds per steady-state iteration (median of the iterations after the
first, marked as ``benchmarks/rl_train.py`` marks them: a device loop over
the whole run divides its launches' time evenly among their iterations,
but for the host's work before a launch, which falls in the launch's first
iteration), the mean of those iterations (``mean s/it``, ``mean CPU``: what
a launch of many iterations costs each, its host work included), and the
last iteration's mean return (the two schedules compute the same
values: bit for bit on NumPy).
Prints a table and writes JSON.

    .venv/bin/python benchmarks/tiled_device_loops.py
    .venv/bin/python benchmarks/tiled_device_loops.py --steps 192 --nstep 0 \
        --out docs/results/tiled_device_loops_whole_run.json                      # tiles that divide the steps
    .venv/bin/python benchmarks/tiled_device_loops.py --steps 192 --nstep 8 \
        --out docs/results/tiled_device_loops_nstep_whole_run.json                # n-step returns' windows too
    .venv/bin/python benchmarks/tiled_device_loops.py --steps 50 --iterations 3   # a smoke test
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


def worker(spec: dict, out_path: str) -> None:
    """Train once as ``spec`` says (:func:`rl_train.measure`, profiled) and write what was measured to ``out_path``."""
    import time

    from rl_train import Point, marking_clock, measure

    from tempo.api import compile as compile_mod

    if spec["schedule"] == "fused":  # shift fusion's schedule, whatever the tiles free while acting
        compile_mod.tiles_freed_while_acting = lambda sdg, program: True
    if spec["schedule"] == "host tiles":  # no shape is a tile's: the loops over tiles stay on the host
        from tempo.plan import device_loops
        device_loops._tile_size = lambda size, tiles: None
    if spec["schedule"] == "host windows":  # no read is a padded window: the loop over t stays on the host
        from tempo.plan import device_loops
        device_loops._window = lambda sdg, e, index, var: None
    cpu_at: dict = {}
    time.perf_counter = marking_clock(time.perf_counter, time.process_time, cpu_at)
    point = Point(steps=spec["steps"], envs=spec["batch"], hidden=32, layers=2, obs_shape=spec["obs_shape"])
    out = measure(f"tempo-{spec['backend']}", "reinforce", point, spec["iterations"], 0, cpu_at, profile=True,
                  options={"nstep": spec["nstep"], "tiles": spec["tiles"]})
    with open(out_path, "w") as f:
        json.dump({**spec, **out}, f)


def run(spec: dict) -> dict:
    """``spec`` measured in a fresh process at one thread."""
    from rl_train import thread_env

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec), out], check=True,
                       env={**thread_env(1), "PYTHONPATH": ROOT}, cwd=ROOT)
        with open(out) as f:
            return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--nstep", type=int, default=8)
    parser.add_argument("--tiles", type=int, default=16)
    parser.add_argument("--obs-shape", default="3,4,4")
    parser.add_argument("--backends", nargs="+", default=["numpy", "jax"])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "tiled_device_loops.json"))
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker[0]), args.worker[1])
        return
    rows = []
    print(f"{'backend':>8} {'schedule':>10} {'device loops':>13} {'launches/it':>12} {'in loop':>8} {'host us/it':>11} "
          f"{'wall s/it':>10} {'CPU s/it':>9} {'mean s/it':>10} {'mean CPU':>9} {'last return':>12}")
    for backend in args.backends:
        jax_only = ("host tiles",) + (("host windows",) if args.nstep else ())
        for schedule in ("fused", "nested") + (jax_only if backend == "jax" else ()):
            row = run({"backend": backend, "schedule": schedule, "steps": args.steps, "batch": args.batch,
                       "iterations": args.iterations, "nstep": args.nstep, "tiles": args.tiles,
                       "obs_shape": args.obs_shape})
            rows.append(row)
            row["run_launches_per_iteration"] = row["profiled_run_launches"] / (args.iterations + 1)
            row["mean_iteration_s"] = statistics.mean(row["iterations_s"][1:])
            row["mean_iteration_cpu_s"] = statistics.mean(row["iterations_cpu_s"][1:])
            print(f"{backend:>8} {schedule:>10} {row['device_loops']:>13} {row['run_launches_per_iteration']:>12.1f} "
                  f"{row['profiled_launches']:>8.1f} "
                  f"{row['profiled_host_us']:>11.0f} {row['iteration_s']:>10.4f} {row['iteration_cpu_s']:>9.4f} "
                  f"{row['mean_iteration_s']:>10.4f} {row['mean_iteration_cpu_s']:>9.4f} "
                  f"{row['returns'][-1]:>12.4f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"threads": 1, "load": os.getloadavg(), "args": {k: v for k, v in vars(args).items() if k != "worker"},
                   "rows": rows}, f, indent=1)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
