"""One decoding step's weight products of the 135M-parameter model on NumPy: OpenBLAS against the panel kernel.

Every weight matrix of ``benchmarks/decode_floor.py``'s model (30 layers of
query/key/value, output, gate, up and down matrices, and the tied 49,152 x 576
output head: 538 MB of float32) is stored as 32-column panels, as
:mod:`tempo.transforms.pack_weights` stores them for one row, and one row is
multiplied by each in the order a decoding step reads them: by NumPy's
``matmul`` (OpenBLAS's matrix-vector products, panel by panel), and by the
native kernel (:mod:`tempo.runtime.backends.panel_products`). Beside them, the
read bandwidth: a float32 buffer of the same bytes read by a BLAS dot product
of it with itself. Each is the fastest of ``--passes`` by the process CPU
clock (one thread) and by the wall clock; the figure is GB/s of weights read.

    .venv/bin/python benchmarks/panel_products.py

Prints a table and writes ``docs/results/panel_products.json``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import argparse  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tempo.files import write_json_atomic  # noqa: E402
from tempo.runtime.backends import panel_products  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HIDDEN, INTERMEDIATE, VOCAB, WIDTH = 30, 576, 1536, 49152, 32
LAYER_SHAPES = [(HIDDEN, 960), (HIDDEN, HIDDEN), (HIDDEN, INTERMEDIATE), (HIDDEN, INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def timed(fn, passes: int) -> dict:
    """The fastest of ``passes`` runs of ``fn`` after one to warm up, in seconds: CPU and wall."""
    fn()
    cpu, wall = [], []
    for _ in range(passes):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return {"cpu_s": min(cpu), "wall_s": min(wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=9)
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "panel_products.json"))
    args = parser.parse_args()
    if panel_products.library() is None:
        raise SystemExit(panel_products.unavailable())
    rng = np.random.default_rng(0)
    stacks = [rng.standard_normal((LAYERS, n // WIDTH, k, WIDTH), dtype=np.float32) for k, n in LAYER_SHAPES]
    head = rng.standard_normal((VOCAB // WIDTH, HIDDEN, WIDTH), dtype=np.float32)
    order = [stack[layer] for layer in range(LAYERS) for stack in stacks] + [head]
    inputs = [rng.standard_normal((1, 1, p.shape[1]), dtype=np.float32) for p in order]
    nbytes = sum(p.nbytes for p in order)
    buffer = np.ones(nbytes // 4, np.float32)
    systems = {"numpy matmul (OpenBLAS)": lambda: [np.matmul(x, p) for x, p in zip(inputs, order)],
               "panel kernel": lambda: [panel_products.product(x, p) for x, p in zip(inputs, order)],
               "read bandwidth (dot of the buffer with itself)": lambda: np.dot(buffer, buffer)}
    rows = [{"system": name, **timed(fn, args.passes)} for name, fn in systems.items()]
    print(f"one decoding step's weight products: {len(order)} matrices, {nbytes / 1e6:.0f} MB float32, one thread")
    print("| system | ms (CPU) | ms (wall) | GB/s (CPU clock) | GB/s (wall) |\n|---|---|---|---|---|")
    for r in rows:
        r["gbps_cpu"], r["gbps_wall"] = nbytes / r["cpu_s"] / 1e9, nbytes / r["wall_s"] / 1e9
        print(f"| {r['system']} | {1e3 * r['cpu_s']:.2f} | {1e3 * r['wall_s']:.2f} | {r['gbps_cpu']:.1f} "
              f"| {r['gbps_wall']:.1f} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    write_json_atomic(args.out, {"commit": commit.strip(), "bytes": nbytes, "passes": args.passes,
                                 "load_average": os.getloadavg(), "machine": platform.processor() or platform.machine(),
                                 "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
