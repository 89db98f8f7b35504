"""The rate at which a decoding step's attention reads its keys and values, against a plain read of the same bytes.

The NumPy backend runs a decoding step's attention for every (sequence, K/V
head) pair of a layer in one native call
(:func:`tempo.runtime.backends.numpy_attention.step`). This script times that
call alone on the keys and values of the 135M-parameter model of
``benchmarks/decode_floor.py`` (30 layers, 3 K/V heads of 64 floats, 3 query
heads each, float32) in the layout a step reads: each layer's keys and values
a block of ``--capacity`` rows per (sequence, head) pair, of which the first
``length`` are read, with a one-token prompt's scores and values as the second
part. A pass is the 30 layers' calls in order, as a step makes them, so the
keys and values come from memory (30 layers at batch 4 and 1,024 rows are
189 MB, beyond the caches), not from the cache that holds one layer's. With
``--between 18`` each call follows a read of 18 MB (a layer's weights, read
between its attention calls in a step), which leaves the caches and the
address translations cold as a step does; ``0``: the calls back to back.
A block is an array of its own size: NumPy asks the kernel for huge pages
(2 MB) for arrays of 4 MB or more, so a layer's keys at batch 4 and 4,096 rows
(12.6 MB) lie on huge pages and at batch 1 (3.1 MB), or batch 4 and 1,024
rows, on 4 KB pages; ``--huge-pages`` puts every block at the first 2 MB
boundary of an array of at least 4 MB, on huge pages whatever its size, as
the NumPy backend's block stores hold blocks of 256 KB to 4 MB
(:mod:`tempo.runtime.backends.huge_pages`).

In the same loop, pass for pass, a plain read (a C loop summing the same runs
of floats into 8 vector sums, so that the loads, not the additions, set its
pace) reads the same bytes, so both see the same machine. A row gives the
median wall and CPU ms of a pass (``--passes``; the calls alone, not the reads
between them) and the rate: the bytes of the keys and values read over the
median CPU time.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/decode_attention_rate.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/decode_attention_rate.py --batch 4 --lengths 1024 --capacity 1024 --huge-pages

Prints a table and writes ``docs/results/decode_attention_rate.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from tempo.files import write_json_atomic  # noqa: E402
from tempo.runtime import native  # noqa: E402
from tempo.runtime.backends import numpy_attention  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, KV_HEADS, GROUPS, DEPTH = 30, 3, 3, 64
HUGE_FLOATS, PAGE_FLOATS = 1 << 20, 1 << 19  # 4 MB: the size from which NumPy asks for huge pages; 2 MB pages

READ_SOURCE = r"""
#include <stdint.h>
#include <string.h>
typedef float f16v __attribute__((vector_size(64)));

/* The sum of `runs` runs of `floats` floats (a multiple of 128), run r at x + r * stride, read with 8
 * vector sums (independent additions: the loads, not the adds, set the pace), to *out. */
void read_runs(const float *x, int64_t runs, int64_t floats, int64_t stride, float *out) {
  f16v a[8] = {0};
  for (int64_t r = 0; r < runs; r++)
    for (const float *p = x + r * stride, *end = p + floats; p < end; p += 128)
      for (int i = 0; i < 8; i++) {
        f16v v;
        memcpy(&v, p + 16 * i, sizeof v);
        a[i] += v;
      }
  f16v s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  float total = 0.0f;
  for (int i = 0; i < 16; i++) total += s[i];
  *out = total;
}
"""


def read_library() -> ctypes.CDLL:
    """The plain read loop, built once per machine (its source written beside the kernel cache)."""
    folder = native.cache_folder()
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(folder, "read_runs.c")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".c")
    with os.fdopen(fd, "w") as f:
        f.write(READ_SOURCE)
    os.replace(tmp, source)
    P, I = ctypes.c_void_p, ctypes.c_int64
    return native.load(source, {"read_runs": [P, I, I, I, P]})


def layers_of(batch: int, capacity: int, rng, huge_pages: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each layer's keys and values: (batch, kv heads, capacity, head_dim) blocks, each pair's rows one run;
    with ``huge_pages`` each block from the first 2 MB boundary of an array of at least 4 MB (NumPy asks the
    kernel for huge pages for those), else an array of its own size, as a block store allocates it."""
    shape = (batch, KV_HEADS, capacity, DEPTH)
    size = math.prod(shape)

    def block():
        if not huge_pages:
            x = np.empty(shape, np.float32)
        else:
            held = np.empty(max(size, HUGE_FLOATS) + PAGE_FLOATS, np.float32)
            start = (-held.ctypes.data % (4 * PAGE_FLOATS)) // 4  # the first huge page's start
            x = held[start:start + size].reshape(shape)
        x[...] = rng.standard_normal(shape, dtype=np.float32)
        return x

    return [(block(), block()) for _ in range(LAYERS)]


def measure(batch: int, length: int, capacity: int, passes: int, between: int, huge_pages: bool,
            reader) -> list[dict]:
    """Median wall and CPU ms of a pass over the 30 layers, the attention's and the plain read's, alternating,
    ``between`` MB read (not timed) before each layer's call."""
    rng = np.random.default_rng(0)
    layers = layers_of(batch, capacity, rng, huge_pages)
    q = rng.standard_normal((batch, KV_HEADS, GROUPS, DEPTH), dtype=np.float32)
    prompt = (rng.standard_normal((batch, KV_HEADS, GROUPS, 1), dtype=np.float32), None,
              rng.standard_normal((batch, KV_HEADS, 1, DEPTH), dtype=np.float32))
    calls = [[(None, k[:, :, :length], v[:, :, :length]), prompt] for k, v in layers]
    scale, sink = np.float32(DEPTH ** -0.5), np.empty(1, np.float32)
    runs, floats = batch * KV_HEADS, length * DEPTH
    weights = np.ones(between << 18, np.float32)

    def attention(i):
        numpy_attention.step(q, calls[i], scale)

    def plain_read(i):
        for x in layers[i]:
            reader.read_runs(x.ctypes.data, runs, floats, capacity * DEPTH, sink.ctypes.data)

    ways = {"attention": attention, "plain read": plain_read}
    times = {way: [] for way in ways}
    for _ in range(passes + 1):
        for way, run in ways.items():
            wall = cpu = 0.0
            for i in range(LAYERS):
                if between:
                    reader.read_runs(weights.ctypes.data, 1, weights.size, 0, sink.ctypes.data)
                w, c = time.perf_counter(), time.process_time()
                run(i)
                wall, cpu = wall + time.perf_counter() - w, cpu + time.process_time() - c
            times[way].append((wall, cpu))
    gigabytes = LAYERS * 2 * runs * floats * 4 / 1e9
    rows = []
    for way, measured in times.items():
        wall, cpu = np.median(np.array(measured[1:]), axis=0)
        rows.append({"batch": batch, "length": length, "between_mb": between, "huge_pages": huge_pages, "way": way,
                     "ms": 1e3 * wall, "cpu_ms": 1e3 * cpu, "gb": gigabytes, "gb_per_s": gigabytes / cpu})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--capacity", type=int, default=None,
                        help="rows a pair's block holds (default: the longest length)")
    parser.add_argument("--passes", type=int, default=9)
    parser.add_argument("--between", type=int, nargs="+", default=[0, 18],
                        help="MB read before each layer's call (18: a layer's weights), not timed")
    parser.add_argument("--huge-pages", action="store_true", help="each block in an array of at least 4 MB")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "decode_attention_rate.json"))
    args = parser.parse_args()
    if numpy_attention.library() is None:
        raise SystemExit(numpy_attention.unavailable())
    capacity = args.capacity or max(args.lengths)
    reader = read_library()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    print("| batch | length | MB read between calls | read by | MB | wall ms | CPU ms | GB/s (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for batch in args.batch:
        for length in args.lengths:
            for between in args.between:
                for row in measure(batch, length, capacity, args.passes, between, args.huge_pages, reader):
                    rows.append(row)
                    print(f"| {batch} | {length} | {between} | {row['way']} | {1e3 * row['gb']:.0f} | "
                          f"{row['ms']:.2f} | {row['cpu_ms']:.2f} | {row['gb_per_s']:.1f} |", flush=True)
    write_json_atomic(args.out, {"commit": commit.strip(), "capacity": capacity, "huge_pages": args.huge_pages,
                                 "layers": LAYERS,
                                 "passes": args.passes, "machine": platform.processor() or platform.machine(),
                                 "cpus": os.cpu_count(), "load_average": os.getloadavg(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
