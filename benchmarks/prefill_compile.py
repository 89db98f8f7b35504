"""Compile time and size of the prefill program against the prompt's length.

Builds the program of a prompt's first token alone (``dp.first``: the prefill,
no decoding step) for the sizes of ``benchmarks/decode_floor.py``'s 135M
model (random weights, two layers: the layer is a dim, so the program is the
same for any depth) and prompts of ``--prompts`` tokens in chunks of
``--chunk``, and reports, for each, the nodes of the program as written and
after the passes, and the compile's CPU and wall time (the fastest of
``--repeats``; compiling runs every pass, the schedule and the lowering).
One thread. Which tempo it measures is the one Python imports: run it with
``PYTHONPATH`` set to another checkout to compare commits in one sitting.

    PYTHONPATH=. .venv/bin/python benchmarks/prefill_compile.py --out docs/results/prefill_compile.json
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse
import subprocess
import time

import numpy as np

SIZE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_heads=9, num_kv_heads=3, head_dim=64)


def measure(prompt_len: int, chunk: int, repeats: int) -> dict:
    import tempo as tpo
    from tempo.llm import program as program_mod
    from tempo.llm.sampling import Sampling

    config = tpo.llm.LlamaConfig(**SIZE, num_layers=2, max_positions=prompt_len + 16)
    weights = tpo.llm.Llama.random(config).weights
    prompt = np.random.default_rng(0).integers(0, SIZE["vocab_size"], (1, prompt_len))
    runs = []
    for _ in range(repeats):
        with tpo.Context() as ctx:
            dp = program_mod.build(config, weights, prompt, tpo.llm.Attention(), Sampling(), prefill_chunk=chunk)
            written = len(ctx.sdg.nodes)
            wall, cpu = time.perf_counter(), time.process_time()
            program = ctx.compile(fetch=[dp.first])
            runs.append((time.process_time() - cpu, time.perf_counter() - wall))
    cpu_s, wall_s = min(runs)
    return {"prompt": prompt_len, "chunk": chunk, "written_nodes": written, "nodes": len(program.sdg.nodes),
            "compile_cpu_s": cpu_s, "compile_s": wall_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="the JSON file to write (default: none)")
    ns = parser.parse_args()
    import tempo
    from tempo.files import write_json_atomic

    where = os.path.dirname(os.path.dirname(os.path.abspath(tempo.__file__)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=where).stdout.strip()
    rows = [measure(n, ns.chunk, ns.repeats) for n in ns.prompts]
    print(f"tempo at {where} ({commit}), chunks of {ns.chunk}, one thread, load average {os.getloadavg()[0]:.1f}")
    print("| prompt | nodes written | nodes compiled | compile CPU s | compile s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['prompt']} | {r['written_nodes']} | {r['nodes']} | {r['compile_cpu_s']:.2f} | {r['compile_s']:.2f} |")
    if ns.out:
        report = {"tempo": where, "commit": commit, "load_average": os.getloadavg(), "rows": rows}
        write_json_atomic(ns.out, report)
        print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
