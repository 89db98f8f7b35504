"""XLA's one-row products on a CPU: the decoding step's weight products, as stored and transposed.

A decoding step of the 26M-parameter model of ``benchmarks/decode.py`` multiplies
the batch's rows by each layer's matrices (q, k and v together (512, 1024), the
output (512, 512), gate and up (512, 1,408) each, down (1,408, 512)) and by the
output head (512, 8,192): 88 MB of float32 weights. This script runs those 31
products, one after the other (each one's input depends on the one before), as
steps of a ``lax.scan`` inside one ``jax.jit``, and NumPy the same products in
a Python loop, and reports the process CPU and wall time per step and the rate
the weights are read at (bytes over CPU time):

- **layout**: ``stored``, the matrices (in, out) as the program holds them
  (``x @ w``); ``transposed``, a copy made once (out, in), multiplied by
  ``lax.dot_general`` contracting both operands' last axes, so a one-row
  product reads each output's weights as one contiguous row;
- **threads**: ``1``, XLA's CPU client with a pool of one thread
  (``PJRT_NPROC=1``); ``pool``, its default pool of one thread per core, on
  which it runs a program's independent operations at the same time (every
  run has ``--xla_cpu_multi_thread_eigen=false``, so no one operation is
  split over threads). NumPy runs on one thread (``OPENBLAS_NUM_THREADS=1``).

Each configuration runs in its own process (the pool's size is fixed when JAX
starts); the least CPU and wall time of ``--repeats`` runs of ``--steps`` steps.

    .venv/bin/python benchmarks/jax_matvec.py      # about a minute

Prints a table and writes ``docs/results/jax_matvec.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYER = [(512, 1024), (512, 512), (512, 1408), (512, 1408), (1408, 512)]
SHAPES = LAYER * 6 + [(512, 8192)]  # (in, out): the products of one decoding step, the head last


def matrices(transposed: bool) -> list:
    import numpy as np

    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in SHAPES]
    return [np.ascontiguousarray(w.T) for w in ws] if transposed else ws


def run_xla(batch: int, transposed: bool, steps: int, repeats: int) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    ws = [jnp.asarray(w) for w in matrices(transposed)]
    x = jnp.asarray(np.random.default_rng(1).standard_normal((batch, 512)).astype(np.float32))

    def product(a, w):
        if transposed:
            return lax.dot_general(a, w, (((1,), (1,)), ((), ())))
        return a @ w

    @jax.jit
    def run(ws, x):
        def step(carry, _):
            h = carry
            for w in ws:  # each product's input depends on the product before it
                rows = w.shape[1] if transposed else w.shape[0]
                a = jnp.broadcast_to(x[:, :1], (batch, rows)) + 1e-30 * jnp.sum(h)
                h = product(a, w)
            return h[:, :1], None

        return lax.scan(step, jnp.zeros((batch, 1), jnp.float32), None, length=steps)[0]

    run(ws, x).block_until_ready()
    return _least(lambda: run(ws, x).block_until_ready(), repeats)


def run_numpy(batch: int, steps: int, repeats: int) -> tuple[float, float]:
    import numpy as np

    ws = matrices(False)
    x = np.random.default_rng(1).standard_normal((batch, 512)).astype(np.float32)

    def run():
        h = np.zeros((batch, 1), np.float32)
        for _ in range(steps):
            for w in ws:
                a = np.broadcast_to(x[:, :1], (batch, w.shape[0])) + np.float32(1e-30) * h.sum()
                h = a @ w
        return h

    run()
    return _least(run, repeats)


def _least(fn, repeats: int) -> tuple[float, float]:
    """The least process CPU and wall seconds of ``repeats`` calls of ``fn``."""
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu, wall


def child(spec: dict) -> dict:
    if spec["system"] == "xla":
        cpu, wall = run_xla(spec["batch"], spec["layout"] == "transposed", spec["steps"], spec["repeats"])
    else:
        cpu, wall = run_numpy(spec["batch"], spec["steps"], spec["repeats"])
    return {"cpu_ms_per_step": 1e3 * cpu / spec["steps"], "wall_ms_per_step": 1e3 * wall / spec["steps"]}


def run_child(spec: dict) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    env.pop("PJRT_NPROC", None)
    if spec["threads"] == "1":
        env["PJRT_NPROC"] = "1"
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2, help="each configuration's process, run this many times in turn")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "jax_matvec.json"))
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(ns.child))))
        return
    megabytes = sum(a * b for a, b in SHAPES) * 4 / 1e6
    configs = [("xla", layout, threads) for threads in ("1", "pool") for layout in ("stored", "transposed")]
    configs.append(("numpy", "stored", "1"))
    rows = []
    print(f"{'batch':>5} {'system':6} {'layout':10} {'threads':7} {'round':>5} {'CPU ms':>7} {'wall ms':>7} "
          f"{'GB/s (CPU)':>10}")
    for batch in ns.batches:
        for r in range(ns.rounds):
            for system, layout, threads in configs:
                spec = {"system": system, "layout": layout, "threads": threads, "batch": batch, "steps": ns.steps,
                        "repeats": ns.repeats}
                out = {**spec, "round": r + 1, "load_1min": os.getloadavg()[0], **run_child(spec)}
                out["gb_per_s"] = megabytes / out["cpu_ms_per_step"]
                rows.append(out)
                print(f"{batch:5d} {system:6} {layout:10} {threads:7} {r + 1:5d} {out['cpu_ms_per_step']:7.2f} "
                      f"{out['wall_ms_per_step']:7.2f} {out['gb_per_s']:10.1f}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    sys.path.insert(0, ROOT)
    from tempo.files import write_json_atomic

    write_json_atomic(ns.out, {"commit": commit.strip(), "weights_mb": megabytes, "shapes": SHAPES,
                               "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                                          f"shared", "rows": rows})
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
