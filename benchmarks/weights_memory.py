"""Resident memory of a loaded Llama and of its first ``generate``, per backend.

The 135M-parameter model of ``benchmarks/decode_floor.py`` (its Q8_0 file, dequantised to float32:
538 MB of weights) loaded with ``tpo.llm.Llama.from_pretrained``, then ``generate`` of ``--new``
tokens after a prompt of ``--prompt`` tokens on each backend of ``--backends``, each in its own
process on one thread. ``rss_mb``: the process's resident memory after importing Tempo, after
loading, and after ``generate`` (with its peak); ``generate_s`` and ``generate_cpu_s``: the call's
wall and CPU time (compile included). ``--tempo-from DIR`` runs the Tempo of another checkout, for a
before/after comparison in one sitting.

    .venv/bin/python benchmarks/weights_memory.py --backends numpy torch --out /tmp/weights_memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1e3


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def child(spec: dict) -> dict:
    import numpy as np

    import tempo as tpo

    if spec["backend"] == "torch":
        import torch

        torch.set_num_threads(1)
    stages = {"imported": rss_mb()}
    model = tpo.llm.Llama.from_pretrained(spec["path"])
    stages["loaded"] = rss_mb()
    prompt = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, spec["prompt"]))
    wall, cpu = time.perf_counter(), time.process_time()
    model.generate(prompt, spec["new"], stop_at_eos=False, backend=spec["backend"])
    out = {"generate_s": time.perf_counter() - wall, "generate_cpu_s": time.process_time() - cpu}
    stages["generated"] = rss_mb()
    return {**out, "rss_mb": stages, "peak_rss_mb": peak_rss_mb()}


def run_child(spec: dict, tempo_from: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **ONE_THREAD, "PYTHONPATH": tempo_from})
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def commit_of(path: str) -> str:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=path).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--backends", nargs="+", default=["numpy", "torch"])
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--model", default=os.path.join("/tmp", "tempo_decode_floor", "random135m-Q8_0-4112.gguf"),
                        help="the GGUF file (benchmarks/decode_floor.py writes it)")
    parser.add_argument("--tempo-from", default=ROOT)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "weights_memory.json"))
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(json.loads(ns.child))))
        return
    if not os.path.exists(ns.model):
        sys.exit(f"{ns.model} does not exist: run benchmarks/decode_floor.py --types Q8_0 first")
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    results = {}
    for backend in ns.backends:
        results[backend] = run_child({"path": ns.model, "backend": backend, "prompt": ns.prompt, "new": ns.new},
                                     os.path.abspath(ns.tempo_from))
        r = results[backend]
        print(f"{backend:6s}", r if "error" in r else
              f"rss MB {r['rss_mb']} peak {r['peak_rss_mb']:.0f}; generate {r['generate_s']:.2f} s "
              f"({r['generate_cpu_s']:.2f} s CPU)")
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    with open(ns.out, "w") as f:
        json.dump({"tempo_commit": commit_of(ns.tempo_from), "prompt": ns.prompt, "new": ns.new,
                   "load_average": {"before": load_before, "after": load_after}, "threads": 1,
                   "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
