"""A decoding step on NumPy with its attention as one native call a layer, and as its steps, alternating in one process.

The NumPy backend runs a decoding step's attention (the scores against the
step's keys, the prompt's scores, one softmax over both, the products with the
values) as one line of its fused island calling
:func:`tempo.runtime.backends.numpy_attention.step`, one native call a layer for
every (sequence, head) pair; without that line the island runs the ~16 steps
one by one (two native products and NumPy passes over the scores). This script
decodes the 135M-parameter model of ``benchmarks/decode_floor.py`` (random
weights, float32, one-token prompts, greedy, one thread) both ways in one
process, alternating run by run (``--runs`` pairs), so that both see the same
machine: on a shared machine the load moves between separate runs by more
than the difference. A run's figure is the mean CPU time (and the median wall
time) per step over the ``--last`` steps before each length of ``--lengths``.

``--island`` times the attention island alone instead (the island of a
one-token prompt's decoding step, as the decoder's fuse pass makes it, up to
the division), compiled both ways, on 30 layers' keys and values held in
buffers of 4,096 rows: ``cached``, two layers' data read 15 times each (in the
cache: the CPU work), and ``memory``, 30 layers' (read from memory), the
fastest of 7 passes of each, alternating.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/decode_attention_line.py --batch 4 --lengths 256
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/decode_attention_line.py --island --batch 4 --lengths 256 1024

Prints a table and writes ``docs/results/decode_attention_line.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, set before NumPy loads its BLAS

import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import tempo as tpo  # noqa: E402
from tempo.files import write_json_atomic  # noqa: E402
from tempo.ir import ops  # noqa: E402
from tempo.llm.config import LlamaConfig  # noqa: E402
from tempo.runtime.backends import numpy_attention, numpy_fused  # noqa: E402
from tempo.runtime.backends.numpy import NumPyBackend  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
                     num_kv_heads=3, head_dim=64, max_positions=8192, rms_norm_eps=1e-5, tie_word_embeddings=True)
WAYS = {"one call": numpy_fused._attention_steps, "steps": lambda op, call_of: {}}


def decode(model, batch: int, lengths: list[int], last: int) -> dict:
    """Per length: the mean CPU ms and the median wall ms per step over the ``last`` steps before it."""
    stamps = {}
    model.generate(np.arange(1, batch + 1)[:, None], max(lengths) - 1, stop_at_eos=False,
                   on_token=lambda tokens, p: stamps.__setitem__(p, (time.perf_counter(), time.process_time())))
    out = {}
    for n in lengths:
        d = np.array([np.subtract(stamps[p], stamps[p - 1]) for p in range(n - last, n)])
        out[str(n)] = {"cpu_ms": 1e3 * float(np.mean(d[:, 1])), "ms": 1e3 * float(np.median(d[:, 0]))}
    return out


def attention_island() -> ops.FusedOp:
    """A decoding step's attention island for a one-token prompt (``tempo.llm.program.attend``): its inputs
    the key rows (S, batch, kv, hd), the transposed queries, the scale, the prompt's scores (their own
    max: one position), the value rows and the prompt's values."""
    E = ops.ElementwiseOp

    def step(op, *inputs):
        return ops.FusedStep(op=op, inputs=inputs, dtypes=("float32",))

    steps = (step(ops.PermuteOp((1, 2, 0, 3)), (-1, 0)), step(ops.MatMulOp(), (0, 0), (-1, 1)),
             step(ops.PermuteOp((0, 1, 3, 2)), (1, 0)), step(E("mul"), (2, 0), (-1, 2)),
             step(ops.ReduceOp("max", (-1,), keepdims=True), (3, 0)), step(E("maximum"), (4, 0), (-1, 3)),
             step(E("sub"), (3, 0), (5, 0)), step(E("exp"), (6, 0)), step(E("sub"), (-1, 3), (5, 0)),
             step(E("exp"), (8, 0)), step(ops.ReduceOp("sum", (-1,), keepdims=True), (7, 0)), step(E("add"), (10, 0), (9, 0)),
             step(ops.PermuteOp((1, 2, 0, 3)), (-1, 4)), step(ops.MatMulOp(), (7, 0), (12, 0)),
             step(ops.MatMulOp(), (9, 0), (-1, 5)), step(E("add"), (13, 0), (14, 0)), step(E("div"), (15, 0), (11, 0)))
    return ops.FusedOp(steps=steps, outputs=((16, 0),))


def island(batch: int, lengths: list[int]) -> list[dict]:
    """The attention island's CPU ms per step (30 layers), both ways, cached and from memory."""
    kernels = {}
    for way, finder in WAYS.items():
        numpy_fused._attention_steps = finder
        kernels[way] = NumPyBackend().kernel(attention_island())
    numpy_fused._attention_steps = WAYS["one call"]
    rng = np.random.default_rng(0)
    kv, groups, depth, layers = CONFIG.num_kv_heads, CONFIG.num_heads // CONFIG.num_kv_heads, CONFIG.head_dim, 30
    rows = []
    for n in lengths:
        stores = [rng.standard_normal((2, batch, kv, 4096, depth), dtype=np.float32)[:, :, :, :n].transpose(0, 3, 1, 2, 4)
                  for _ in range(layers)]
        qt = rng.standard_normal((batch, kv, depth, groups), dtype=np.float32)
        prompt = rng.standard_normal((batch, kv, groups, 1), dtype=np.float32)
        values = rng.standard_normal((batch, kv, 1, depth), dtype=np.float32)
        reads = {"cached": stores[:2] * (layers // 2), "memory": stores}
        for where, held in reads.items():
            calls = [[s[0], qt, np.float32(CONFIG.head_dim ** -0.5), prompt, s[1], values] for s in held]
            times = {way: [] for way in kernels}
            for _ in range(7):
                for way, kernel in kernels.items():
                    start = time.process_time()
                    for inputs in calls:
                        kernel(inputs, {}, ())
                    times[way].append(time.process_time() - start)
            for way in kernels:
                rows.append({"length": n, "where": where, "way": way, "cpu_ms": 1e3 * min(times[way])})
                print(f"| {n} | {where} | {way} | {1e3 * min(times[way]):.2f} |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256])
    parser.add_argument("--last", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs, each way once a pair")
    parser.add_argument("--island", action="store_true", help="time the attention island alone")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "results", "decode_attention_line.json"))
    args = parser.parse_args()
    if numpy_attention.library() is None:
        raise SystemExit(numpy_attention.unavailable())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    report = {"commit": commit.strip(), "batch": args.batch, "lengths": args.lengths,
              "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    if args.island:
        print("| length | keys and values | attention | CPU ms per step (30 layers) |\n|---|---|---|---|")
        rows = island(args.batch, args.lengths)
        write_json_atomic(args.out, {**report, "part": "island", "load_average": os.getloadavg(), "rows": rows})
        print(f"wrote {args.out}")
        return
    model = tpo.llm.Llama.random(CONFIG)
    runs = []
    for run in range(args.runs):
        for way, finder in WAYS.items():
            numpy_fused._attention_steps = finder
            rows = decode(model, args.batch, args.lengths, args.last)
            runs.append({"run": run, "way": way, "load_average": os.getloadavg(), "rows": rows})
            print(f"run {run} {way}: {rows}", flush=True)
    numpy_fused._attention_steps = WAYS["one call"]
    print("| length | way | CPU ms per step, each run | mean | wall ms per step, each run |")
    print("|---|---|---|---|---|")
    for n in map(str, args.lengths):
        for way in WAYS:
            cpu = [r["rows"][n]["cpu_ms"] for r in runs if r["way"] == way]
            wall = [r["rows"][n]["ms"] for r in runs if r["way"] == way]
            print(f"| {n} | {way} | {', '.join(f'{c:.1f}' for c in cpu)} | {np.mean(cpu):.1f} | "
                  f"{', '.join(f'{w:.1f}' for w in wall)} |")
    write_json_atomic(args.out, {**report, "last": args.last, "runs": runs})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
