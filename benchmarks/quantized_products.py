"""Weight products at batch 1 from quantised weights: float32 GEMV against each compiled option.

The products of one decoding step of a 135M-parameter Llama-family model
(hidden 576, intermediate 1,536, 9 heads and 3 key/value heads, vocabulary
49,152, 30 layers): the query/key/value matrices as one (960 x 576), the
output projection (576 x 576), the gate and up matrices as one (3,072 x 576),
the down projection (576 x 1,536) and the output head (49,152 x 576), random
Q8_0 and Q4_1 blocks (float16 scales, as GGUF stores them). One thread.

Each option computes ``x @ W^T`` for ``x`` (1, in):

- **numpy-f32**, **torch-f32**: the float32 weights (4 bytes a weight);
- **tempo-native**: Tempo's native kernels (``tempo/llm/quantized_kernels.c``);
- **tempo-int8-inputs**: the native kernels with the input rounded to 8 bits per
  block of 32 first (``tempo/llm/int8_input_kernels.c``, AVX512-VNNI: integer
  dot products; its error is the input's rounding);
- **tempo-panels**: Tempo's NumPy products (a panel of rows widened at a time);
- **torch-int4-f32** / **torch-int4-bf16**: ``aten._weight_int4pack_mm_for_cpu``
  (group-wise scale and zero per 32, which holds Q4_1 exactly: ``w = d (q - 8) +
  (m + 8 d)``) with float32 or bfloat16 inputs and scales;
- **torch-int8-f32** / **torch-int8-bf16**: ``aten._weight_int8pack_mm`` (one
  scale per output row: Q8_0's scale per 32 has no exact form in it, so its
  error is not reported; timed with Q8_0's integers).

``ms`` per product is the best of 3 loops over the same weights (they stay in the
cache); ``token_ms`` is one step's products with distinct weights per layer (30 x
the four layer products and the head: the weights stream from memory), the
best of 5. ``rel_err`` is the largest error of the output against the float64
product of the dequantised weights, over the largest output. Both wall and
process-CPU times are reported.

    .venv/bin/python benchmarks/quantized_products.py

Prints a table and writes ``docs/results/quantized_products.json``.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

import numpy as np
import torch

from tempo.files import write_json_atomic
from tempo.llm import native
from tempo.llm.quantized import QuantizedMatrices

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = 30
PRODUCTS = {"qkv": (960, 576), "wo": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
HEAD = (49152, 576)


def blocks(type_name: str, out: int, inputs: int, rng) -> np.ndarray:
    """Random GGUF bytes (out, bytes per row) of Q8_0 or Q4_1, float16 scales for weights of
    about 1 / sqrt(inputs)."""
    n = out * inputs // 32
    d = (rng.uniform(0.5, 1.0, (n, 1)) / np.sqrt(inputs) / (8 if type_name == "Q4_1" else 64)).astype(np.float16)
    if type_name == "Q8_0":
        q = rng.integers(-127, 128, (n, 32), dtype=np.int8).view(np.uint8)
        return np.concatenate([d.view(np.uint8), q], axis=1).reshape(out, -1)
    m = (-8 * d.astype(np.float32)).astype(np.float16)
    q = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    return np.concatenate([d.view(np.uint8), m.view(np.uint8), q], axis=1).reshape(out, -1)


def options(type_name: str, matrices: QuantizedMatrices):
    """name -> (product of x (1, in) -> (1, out), exact): each option built once from the matrices."""
    w = matrices.dequantize(0)
    out, inputs = w.shape
    found = {"numpy-f32": (lambda x, t=np.ascontiguousarray(w.T): x @ t, True),
             "torch-f32": (lambda x, t=torch.from_numpy(w): torch.nn.functional.linear(torch.from_numpy(x), t), True),
             "tempo-panels": (lambda x: matrices.panel_matmul(x, 0), True)}
    if native.kernels() is not None:
        found["tempo-native"] = (lambda x: matrices.native_matmul(x, 0), True)
    if native.int8_input_kernels() is not None:
        rounded = matrices.with_int8_inputs()
        found["tempo-int8-inputs"] = (lambda x: rounded.native_matmul(x, 0), True)
    q, d = torch.from_numpy(matrices.q[0]), torch.from_numpy(matrices.scale[0])
    if type_name == "Q4_1":
        values = torch.cat([q & 15, q >> 4], dim=-1).reshape(out, inputs).to(torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, 1)
        zero = torch.from_numpy(matrices.offset[0]) + 8 * d
        scales = torch.stack([d, zero], dim=-1).transpose(0, 1).contiguous()      # (in / 32, out, 2)
        for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            s = scales.to(dtype)
            found[f"torch-int4-{name}"] = (
                lambda x, s=s, dtype=dtype: torch.ops.aten._weight_int4pack_mm_for_cpu(
                    torch.from_numpy(x).to(dtype), packed, 32, s), dtype == torch.float32)
    else:
        values, row_scale = q.reshape(out, inputs), d.mean(dim=1)
        for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            found[f"torch-int8-{name}"] = (
                lambda x, dtype=dtype: torch.ops.aten._weight_int8pack_mm(torch.from_numpy(x).to(dtype), values,
                                                                          row_scale.to(dtype)), None)
    return found


def best(fn, repeats: int, rounds: int = 3) -> tuple[float, float]:
    """The least (wall ms, CPU ms) per call over ``rounds`` loops of ``repeats`` calls."""
    fn()
    runs = []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(repeats):
            fn()
        runs.append(((time.perf_counter() - wall) / repeats * 1e3, (time.process_time() - cpu) / repeats * 1e3))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def error(fn, matrices: QuantizedMatrices, rng) -> float:
    x = rng.standard_normal((1, matrices.in_features)).astype(np.float32)
    expected = x.astype(np.float64) @ matrices.dequantize(0).astype(np.float64).T
    got = fn(x)
    got = got.float().numpy() if isinstance(got, torch.Tensor) else got
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def measure(type_name: str, rng) -> list[dict]:
    shapes = {**PRODUCTS, "head": HEAD}
    first = {name: QuantizedMatrices.from_raw(type_name, [blocks(type_name, *shape, rng)], *shape)
             for name, shape in shapes.items()}
    built = {name: options(type_name, m) for name, m in first.items()}
    stack = [{name: options(type_name, QuantizedMatrices.from_raw(type_name, [blocks(type_name, *s, rng)], *s))
              for name, s in PRODUCTS.items()} for _ in range(LAYERS - 1)]
    rows = []
    for option in built["head"]:
        inputs = {name: rng.standard_normal((1, s[1])).astype(np.float32) for name, s in shapes.items()}
        row = {"type": type_name, "option": option, "ms": {}, "cpu_ms": {}}
        for name, found in built.items():
            fn = found[option][0]
            row["ms"][name], row["cpu_ms"][name] = best(lambda: fn(inputs[name]), 3 if name == "head" else 100)
        exact = built["head"][option][1]
        row["rel_err"] = None if exact is None else max(error(built[n][option][0], first[n], rng) for n in first)
        layers = [{n: f[option][0] for n, f in built.items() if n != "head"}] + \
                 [{n: f[option][0] for n, f in layer.items()} for layer in stack]
        head = built["head"][option][0]

        def token():
            for layer in layers:
                for name, fn in layer.items():
                    fn(inputs[name])
            head(inputs["head"])

        slow = row["cpu_ms"]["gate_up"] > 1.0        # the scalar kernels: one step takes seconds
        row["token_ms"], row["token_cpu_ms"] = best(token, 1, 1 if slow else 5)
        row["bytes_per_token"] = bytes_read(option, first)
        rows.append(row)
        print(f"{type_name} {option:16s} token {row['token_cpu_ms']:7.2f} ms CPU  err {row['rel_err']}", flush=True)
    return rows


# bytes a weight of the torch options reads: float32 weights; 4-bit values with a scale and a zero
# per 32 (float32 or bfloat16); int8 values (one scale per row)
TORCH_BYTES = {"torch-f32": 4, "torch-int4-f32": 0.5 + 8 / 32, "torch-int4-bf16": 0.5 + 4 / 32,
               "torch-int8-f32": 1, "torch-int8-bf16": 1, "numpy-f32": 4}


def bytes_read(option: str, first: dict) -> int:
    """The weight bytes one step's products read with ``option``."""
    counts = {n: (LAYERS if n != "head" else 1) for n in first}
    if option.startswith("tempo"):
        return sum(m.nbytes_per_layer * counts[n] for n, m in first.items())
    return int(sum(TORCH_BYTES[option] * m.out_features * m.in_features * counts[n] for n, m in first.items()))


def table(rows: list[dict]) -> str:
    names = list(PRODUCTS) + ["head"]
    lines = ["| file | option | " + " | ".join(f"{n} ms" for n in names) + " | ms per token (CPU / wall) "
             "| MB read per token | max rel. error |", "|---" * (len(names) + 5) + "|"]
    for r in rows:
        err = "not exact (row scales)" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
        lines.append(f"| {r['type']} | {r['option']} | " + " | ".join(f"{r['cpu_ms'][n]:.3f}" for n in names)
                     + f" | {r['token_cpu_ms']:.2f} / {r['token_ms']:.2f} | {r['bytes_per_token'] / 1e6:.0f} | {err} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", nargs="+", default=["Q8_0", "Q4_1"], choices=["Q8_0", "Q4_1"])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "quantized_products.json"))
    ns = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = [row for type_name in ns.types for row in measure(type_name, rng)]
    print(table(rows))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    report = {"commit": commit.strip(), "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "torch": torch.__version__, "threads": 1,
              "native": native.unavailable() or "built", "rows": rows}
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    write_json_atomic(ns.out, report)
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
