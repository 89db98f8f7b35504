"""One decoding step's products of the 135M-parameter model on NumPy: OpenBLAS against the native kernels.

Every weight matrix of ``benchmarks/decode_floor.py``'s model as ``tpo.llm`` holds
it (30 layers of the joined query/key/value matrix, the output matrix, the
joined gate and up matrix and the down matrix, and the tied 49,152 x 576
output head: 538 MB of float32) is stored as column panels, as
:mod:`tempo.transforms.pack_weights` stores them for each of ``--rows`` input
rows (the NumPy backend's width: 32 columns for one row, 64 for 2 to 4), and
that many rows are multiplied by each in the order a decoding step reads them:
by NumPy's ``matmul`` (OpenBLAS, panel by panel), and by the native kernel
(:func:`tempo.runtime.backends.skinny_products.panels`). Beside
them, the read bandwidth: a float32 buffer of the same bytes read by a BLAS dot
product of it with itself. Then attention's products of a step at each of
``--positions``: per layer, the scores ``keys @ q^T`` and ``weights @ values``
over keys and values of (1, 3 heads, S, 64) held in a buffer of room for 4,096
rows, as the NumPy backend runs them without the kernels (``np.matmul``, or
one matrix-vector product per query row from 512 positions: ``_by_rows``) and
with them (:func:`~tempo.runtime.backends.skinny_products.stacked`). Each is
the fastest of ``--passes`` by the process CPU clock (one thread) and by the
wall clock; the figure is GB/s of weights (or keys and values) read.

    .venv/bin/python benchmarks/skinny_products.py

Prints the tables and writes ``docs/results/skinny_products.json``.
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
from tempo.runtime.backends import numpy as numpy_backend  # noqa: E402
from tempo.runtime.backends import skinny_products  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HIDDEN, INTERMEDIATE, VOCAB = 30, 576, 1536, 49152
LAYER_SHAPES = [(HIDDEN, 960), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


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


def without_kernels(a, b, replaced: dict):
    """The NumPy backend's product with ``skinny_products``' functions replaced by ``replaced``'s."""
    saved = {name: getattr(skinny_products, name) for name in replaced}
    for name, fn in replaced.items():
        setattr(skinny_products, name, fn)
    try:
        return numpy_backend._matmul(a, b)
    finally:
        for name, fn in saved.items():
            setattr(skinny_products, name, fn)


def weight_products(count: int, rng, passes: int) -> list[dict]:
    """The step's weight products of ``count`` input rows (panels of the NumPy backend's width for
    them) by NumPy's ``matmul`` and by the panel kernel, and the read bandwidth over as many bytes."""
    width = numpy_backend.NumPyBackend().weight_panel(count)
    stacks = [rng.standard_normal((LAYERS, n // width, k, width), dtype=np.float32) for k, n in LAYER_SHAPES]
    head = rng.standard_normal((VOCAB // width, HIDDEN, width), dtype=np.float32)
    order = [stack[layer] for layer in range(LAYERS) for stack in stacks] + [head]
    inputs = [rng.standard_normal((1, count, p.shape[1]), dtype=np.float32) for p in order]
    nbytes = sum(p.nbytes for p in order)
    buffer = np.ones(nbytes // 4, np.float32)
    systems = {"numpy matmul (OpenBLAS)": lambda: [np.matmul(x, p) for x, p in zip(inputs, order)],
               "panel kernel": lambda: [skinny_products.panels(x, p) for x, p in zip(inputs, order)],
               "read bandwidth (dot of the buffer with itself)": lambda: np.dot(buffer, buffer)}
    return [{"part": "weights", "system": name, "rows": count, "width": width, "bytes": nbytes, **timed(fn, passes)}
            for name, fn in systems.items()]


def table(rows: list, by: str) -> None:
    print(f"| system | {by} | MB | ms (CPU) | ms (wall) | GB/s (CPU clock) | GB/s (wall) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        r["gbps_cpu"], r["gbps_wall"] = r["bytes"] / r["cpu_s"] / 1e9, r["bytes"] / r["wall_s"] / 1e9
        print(f"| {r['system']} | {r.get(by, '')} | {r['bytes'] / 1e6:.0f} | {1e3 * r['cpu_s']:.2f} "
              f"| {1e3 * r['wall_s']:.2f} | {r['gbps_cpu']:.1f} | {r['gbps_wall']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=9)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4], help="input rows of the weight products")
    parser.add_argument("--positions", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "skinny_products.json"))
    args = parser.parse_args()
    if skinny_products.library() is None:
        raise SystemExit(skinny_products.unavailable())
    rng = np.random.default_rng(0)
    rows = [row for count in args.rows for row in weight_products(count, rng, args.passes)]
    print(f"one decoding step's weight products: {len(LAYER_SHAPES) * LAYERS + 1} matrices, {rows[0]['bytes'] / 1e6:.0f} MB "
          "float32, one thread; rows: input rows (panels of 32 columns for 1, 64 for 2 to 4)")
    table(rows, "rows")
    attention = []
    for n in args.positions:
        stores = [rng.standard_normal((1, 3, 4096, 64), dtype=np.float32)[:, :, :n] for _ in range(2 * LAYERS)]
        queries = np.ascontiguousarray(rng.standard_normal((1, 3, 64, 3), dtype=np.float32))
        weights = rng.standard_normal((1, 3, 3, n), dtype=np.float32)
        nbytes = sum(s.nbytes for s in stores)

        def step(product):
            return lambda: [(product(k, queries), product(weights, v)) for k, v in zip(stores[::2], stores[1::2])]

        without = {"stacked": lambda a, b: None}
        for name, fn in {"numpy backend without the kernels": step(lambda a, b: without_kernels(a, b, without)),
                         "skinny kernels": step(skinny_products.stacked)}.items():
            attention.append({"part": "attention", "positions": n, "system": name, "bytes": nbytes,
                              **timed(fn, args.passes)})
    print("\none decoding step's attention products (30 layers, scores and values), one thread")
    table(attention, "positions")
    rows += attention
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    write_json_atomic(args.out, {"commit": commit.strip(), "passes": args.passes,
                                 "load_average": os.getloadavg(), "machine": platform.processor() or platform.machine(),
                                 "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
