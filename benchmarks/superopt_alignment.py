"""Does a kernel's speed depend on where its arrays lie? Weights at 0, 4, 16 and 32 bytes from
a 64-byte boundary.

1. ``kernel``: the workload's matmul or convolution with the largest weight
   (the torch backend's kernel for it) on a weight that is a NumPy view at
   each offset, used in place (``torch.from_numpy``, no copy), as the torch
   backend used weights until the fifteenth session.
2. ``graph``: the whole workload with every weight at each offset, compiled
   by :func:`tempo.superopt.torch_backend.compile_graph`, which now copies
   weights and inputs into memory torch allocates (64-byte aligned): the four
   compiles should time alike (ties).

Each variant is timed interleaved against offset 0 (``--rounds`` rounds of
10 runs, a random order per round) and judged by
:func:`tempo.superopt.stats.paired_verdict`; ratios above 1 mean offset 0 is faster.

    .venv/bin/python benchmarks/superopt_alignment.py            # every workload, ~3 minutes
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np
import torch

from tempo.files import write_bytes_atomic
from tempo.superopt.graph import Graph
from tempo.superopt.execute import time_calls
from tempo.superopt.latency import Latency
from tempo.superopt.models import SCALES, WORKLOADS, build
from tempo.superopt.reference import random_feeds
from tempo.superopt.stats import paired_verdict
from tempo.superopt.torch_backend import KERNELS, compile_graph

OFFSETS = (0, 4, 16, 32)        # bytes past a 64-byte boundary


def at_offset(array: np.ndarray, offset: int) -> np.ndarray:
    """A float32 copy of ``array`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    array = np.asarray(array, np.float32)
    buffer = np.empty(array.nbytes + 128, np.uint8)
    start = (-buffer.ctypes.data) % 64 + offset
    placed = buffer[start:start + array.nbytes].view(np.float32).reshape(array.shape)
    placed[...] = array
    return placed


def largest_weighted(graph: Graph):
    """The graph's matmul or conv2d with the largest weight."""
    weighted = [n for n in graph.topo() if n.op in ("matmul", "conv2d") and n.src[1].op == "weight"]
    return max(weighted, key=lambda n: int(np.prod(n.src[1].shape)))


def verdicts(lat: dict[int, Latency], rounds: int) -> dict[int, dict]:
    """Each offset against offset 0."""
    return {k: paired_verdict(lat[k], lat[0], rounds).record() for k in OFFSETS[1:]}


def kernel_check(graph: Graph, rounds: int) -> dict:
    """The graph's largest matmul or convolution (its torch kernel) with its weight at each
    offset, used in place."""
    op = largest_weighted(graph)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(at_offset(rng.standard_normal(op.src[0].shape), 0))
    weight = rng.standard_normal(op.src[1].shape)
    ws = {k: torch.from_numpy(at_offset(weight, k)) for k in OFFSETS}
    kernel, attrs = KERNELS[op.op], dict(op.attrs)
    lat = time_calls({k: [lambda w=w: kernel(attrs, x, w)] for k, w in ws.items()}, rounds)
    return {"op": op.op, "shapes": [list(op.src[0].shape), list(op.src[1].shape)],
            "median_ms": lat[0].median_ms, "vs_offset_0": verdicts(lat, rounds)}


def graph_check(graph: Graph, rounds: int) -> dict:
    """The whole graph with every weight at each offset, through ``compile_graph``."""
    feeds = random_feeds(graph, 0)
    fns = {k: compile_graph(dataclasses.replace(
        graph, weights={n: at_offset(w, k) for n, w in graph.weights.items()})) for k in OFFSETS}
    lat = time_calls({k: [lambda f=f: f(feeds)] for k, f in fns.items()}, rounds)
    return {"median_ms": lat[0].median_ms, "vs_offset_0": verdicts(lat, rounds)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--scale", default="small", choices=SCALES)
    p.add_argument("--rounds", type=int, default=40, help="interleaved rounds")
    p.add_argument("--out", default="benchmarks/results/superopt_alignment.json")
    ns = p.parse_args()
    torch.set_num_threads(1)
    report = {}
    print("| workload | check | offset 0 ms | " + " | ".join(f"{k} B / 0 B [95% CI]" for k in OFFSETS[1:])
          + " |\n|---|---|---|" + "---|" * (len(OFFSETS) - 1))
    for name in ns.workloads:
        graph = build(name, scale=ns.scale)
        report[name] = {"kernel": kernel_check(graph, ns.rounds), "graph": graph_check(graph, ns.rounds)}
        for check, r in report[name].items():
            cells = [f"{v['ratio']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}] {v['verdict']}"
                     for v in r["vs_offset_0"].values()]
            label = f"{check} ({r['op']})" if "op" in r else check
            print(f"| {name} | {label} | {r['median_ms']:.4f} | " + " | ".join(cells) + " |")
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    write_bytes_atomic(ns.out, json.dumps({"scale": ns.scale, "rounds": ns.rounds, "workloads": report},
                                          indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
