"""The host's preparation of device-loop launches: process-CPU ms per decoding step on JAX.

The random-weight Llama of ``benchmarks/decode.py`` decodes ``--new`` tokens
with masked attention on JAX (one thread: ``PJRT_NPROC=1``), its loop over
``t`` one device program launched in chunks of steps, and the process CPU
spent in each launch's preparation (``DeviceLoop._prepared``: the schedule,
the values read from stores, the islands' symbol values, index starts and
random numbers, the nested loops' values stacked) is summed per run and
divided by the run's steps; the figures are the runs', least first. One more
run counts the Python function calls the preparation makes per step (a figure
the machine's load does not move). Run it
on two commits (``git worktree add --detach``) to compare them. Prints a
table and writes JSON.

    .venv/bin/python benchmarks/launch_preparation.py --out docs/results/launch_preparation_decode.json
"""
from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PJRT_NPROC"):
    os.environ[_name] = "1"
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import ROOT, Size, model_config, weights  # noqa: E402
from decode_eos import compiled, timed  # noqa: E402


def preparation(batch: int, new: int, repeats: int) -> dict:
    """Process-CPU ms of launch preparation per step of each run, each run's CPU ms per step, and the
    Python function calls the preparation makes per step (one more run, counted with ``sys.setprofile``)."""
    from tempo.runtime.device_loops import DeviceLoop

    spent, calls, counting = [0.0], [0], [False]
    prepared = DeviceLoop._prepared

    def count(_frame, event, _arg):
        if event == "call":
            calls[0] += 1

    def counted(self, *args, **kwargs):
        if counting[0]:
            sys.setprofile(count)
        started = time.process_time()
        try:
            return prepared(self, *args, **kwargs)
        finally:
            spent[0] += time.process_time() - started
            sys.setprofile(None)

    DeviceLoop._prepared = counted
    size = Size()
    config, wts = model_config(size, 8 + new), weights(size, 8 + new)
    prompt = np.random.default_rng(0).integers(0, size.vocab, (batch, 8))
    dp, program = compiled(config, wts, prompt, None, "jax", True, new, None)
    timed(dp, program, size.layers, new)  # compiles
    rows = []
    for _ in range(repeats):
        spent[0] = 0.0
        run = timed(dp, program, size.layers, new)
        rows.append((spent[0] / run["steps"] * 1e3, run["cpu_s"] / run["steps"] * 1e3))
    rows.sort()
    counting[0] = True
    run = timed(dp, program, size.layers, new)
    return {"batch": batch, "steps": new - 1, "prepare_cpu_ms_per_step": [r[0] for r in rows],
            "cpu_ms_per_step": [r[1] for r in rows], "prepare_calls_per_step": calls[0] / run["steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--new", type=int, default=128, help="max_new_tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "launch_preparation_decode.json"))
    ns = parser.parse_args()
    if len(ns.batches) > 1:  # each batch in a fresh process
        results = [json.loads(subprocess.run(
            [sys.executable, __file__, "--batches", str(batch), "--new", str(ns.new), "--repeats", str(ns.repeats),
             "--out", "-"], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            for batch in ns.batches]
    else:
        results = [preparation(ns.batches[0], ns.new, ns.repeats)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    report = {"commit": commit.stdout.strip(), "load_average": os.getloadavg(), "runs": results}
    if ns.out == "-":
        print(json.dumps(results[0]))
        return
    print("batch  prepare CPU ms/step (least, median)  calls/step  CPU ms/step (least)")
    for r in results:
        print(f"{r['batch']:5d}  {r['prepare_cpu_ms_per_step'][0]:8.3f} {np.median(r['prepare_cpu_ms_per_step']):8.3f}"
              f"  {r['prepare_calls_per_step']:10.1f}  {min(r['cpu_ms_per_step']):8.3f}")
    from tempo.files import write_json_atomic

    write_json_atomic(ns.out, report)
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
