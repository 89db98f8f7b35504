"""Start-up seconds of a few programs: the imports, building the program and its compile, stage by stage.

Each program runs in a fresh process at one thread (NumPy/BLAS), as a user's
script does, up to the end of its first compile (``compile_program`` is
wrapped to time it, and the script stops there). Per program, in wall and
process-CPU seconds:

- ``start``: the interpreter's own start (process CPU only: its CPU seconds
  when the script's first line runs);
- ``import``: importing the example (tempo, NumPy, islpy, tqdm and what the
  example imports itself);
- ``build``: from there to the call of ``compile_program`` (the program's
  construction, autodiff, and the modules imported on first use);
- ``compile``: ``compile_program``, with each stage's process-CPU seconds
  (``program.timings``: the passes, ``analyse``, ``schedule``, ``ast``,
  ``memory``, ``plan``, ``codegen``);
- ``total``: the process's CPU seconds at the end of the compile.

Each program is run ``--repeats`` times; the run with the least ``total``
CPU is reported (every run's seconds are in the JSON). Python's bytecode is
cached as an install caches it: every worker writes and reads its ``.pyc``
files under one temporary ``PYTHONPYCACHEPREFIX`` (``PYTHONDONTWRITEBYTECODE``
unset), filled by an untimed run of each program first.

Programs: ``examples/reinforce.py`` on CartPole through gymnasium, one
episode per iteration (``--batch 1 --baseline episode``, the gymnasium rows
of ``benchmarks/dynamic_termination.py``), with ``--until`` and padded;
``examples/ppo.py``'s rollout program and ``examples/ppo_fixed_horizon.py``
(CartPole through gymnasium, their default sizes); and a tiny Llama
decoding program (``tempo.llm.program.build``, random weights: 2 layers,
hidden 64, vocabulary 256, 4 prompts of 1 token).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/compile_time.py --out /tmp/compile_time.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tempo.files import write_json_atomic  # noqa: E402

THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
REINFORCE = {"iterations": 1, "batch": 1, "seed": 0, "impl": "gymnasium", "baseline": "episode", "lr": 0.005,
             "lr_decay": 1.0, "backend": "numpy"}
EXAMPLES = {"reinforce-until": ("reinforce", {**REINFORCE, "until": True}),
            "reinforce-padded": ("reinforce", {**REINFORCE, "until": False}),
            "ppo-rollout": ("ppo", {"total_timesteps": 512}),
            "ppo-fixed-horizon": ("ppo_fixed_horizon", {"iterations": 1})}
STAGES = ("start", "import", "build", "compile", "total")

PROLOGUE = """
import sys, time
start_wall, start_cpu = time.perf_counter(), time.process_time()
sys.path.insert(0, {examples!r})
"""

EPILOGUE = """
marks = {{"import": (time.perf_counter(), time.process_time())}}
import json
from tempo.api import compile as compile_mod

compile_program, found = compile_mod.compile_program, {{}}


class Compiled(Exception):
    pass


def timing(*args, **kwargs):  # the compiler's clock reads process CPU time meanwhile
    marks["build"] = (time.perf_counter(), time.process_time())
    wall = time.perf_counter
    time.perf_counter = time.process_time
    try:
        program = compile_program(*args, **kwargs)
    finally:
        time.perf_counter = wall
    marks["compile"] = (time.perf_counter(), time.process_time())
    found.update(nodes=len(program.sdg.nodes), stages=dict(program.timings))
    raise Compiled


compile_mod.compile_program = timing
try:
    {run}
except Compiled:
    pass
last_wall, last_cpu = start_wall, start_cpu
wall, cpu = {{"start": 0.0}}, {{"start": start_cpu}}
for stage in ("import", "build", "compile"):
    wall[stage], cpu[stage] = marks[stage][0] - last_wall, marks[stage][1] - last_cpu
    last_wall, last_cpu = marks[stage]
wall["total"], cpu["total"] = last_wall - start_wall, last_cpu
print("RESULT " + json.dumps({{"wall": wall, "cpu": cpu, **found}}))
"""

LLAMA_IMPORT = """
import numpy as np
import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.sampling import Sampling
from tempo.llm.weights import Weights
"""

LLAMA_RUN = ("config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, "
             "num_kv_heads=2, head_dim=16, max_positions=256)\n"
             "    with tpo.Context() as ctx:\n"
             "        dp = program_mod.build(config, Weights.random(config, seed=0), np.ones((4, 1), np.int64), "
             "Attention(), Sampling())\n"
             "        ctx.compile(fetch=[dp.tokens])")


def worker_code(label: str) -> str:
    """The script one timed process runs for ``label``."""
    head = PROLOGUE.format(examples=os.path.join(ROOT, "examples"))
    if label == "llm-decode-tiny":
        return head + LLAMA_IMPORT + EPILOGUE.format(run=LLAMA_RUN)
    module, settings = EXAMPLES[label]
    run = f"{module}.main({module}.Args(**{settings!r}))"
    return head + f"import {module}\n" + EPILOGUE.format(run=run)


def worker_env(pycache: str) -> dict:
    """A worker's environment: one thread, this tree on the path, bytecode cached under ``pycache``."""
    env = {**os.environ, **THREADS, "PYTHONPATH": ROOT, "PYTHONPYCACHEPREFIX": pycache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run(label: str, pycache: str, timeout: float) -> dict:
    """One fresh process's seconds for ``label``."""
    done = subprocess.run([sys.executable, "-c", worker_code(label)], capture_output=True, text=True, cwd=ROOT,
                          env=worker_env(pycache), timeout=timeout)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"{label} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per program; the least CPU is kept")
    parser.add_argument("--programs", nargs="*", default=[*EXAMPLES, "llm-decode-tiny"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tempo-pycache-") as pycache:
        for label in args.programs:
            run(label, pycache, args.timeout)  # untimed: writes the bytecode cache
        print(f"{'program':<18} {'nodes':>5}  " + "  ".join(f"{s + ' cpu/wall':>18}" for s in STAGES))
        for label in args.programs:
            runs = [run(label, pycache, args.timeout) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["cpu"]["total"])
            rows.append({"program": label, **best, "runs": runs})
            print(f"{label:<18} {best['nodes']:>5}  " + "  ".join(
                f"{best['cpu'][s]:8.3f} / {best['wall'][s]:7.3f}" for s in STAGES), flush=True)
    for row in rows:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in row["stages"].items() if v >= 0.002)
        print(f"{row['program']:<18} compile stages (CPU s): {stages}")
    write_json_atomic(args.out, {"rows": rows, "repeats": args.repeats, "threads": THREADS,
                                 "load_average": os.getloadavg()})


if __name__ == "__main__":
    main()
