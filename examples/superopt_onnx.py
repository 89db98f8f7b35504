"""Superoptimise an ONNX model with each tempo.superopt agent, end to end.

Writes one of the benchmark's workloads (small shapes) as an ONNX file, then
runs ``tempo superopt IN.onnx --output OUT.onnx --agent A --budget-seconds S``
for each agent. Every written model is checked against the input with
``onnx.reference.ReferenceEvaluator`` on random inputs, and the input and all
results are timed together, interleaved (one thread, CPU; ``--backend``
picks where every graph is measured, searched and timed: torch eager, or JAX,
where a graph is one jitted XLA program and the rules' fusions are XLA's own).

    python examples/superopt_onnx.py --workload squeezenet --budget-seconds 60 \\
        --agents greedy backtrack eqsat rl
    python examples/superopt_onnx.py --workload inception --backend jax --agents greedy eqsat

Each agent's run keeps to ``--budget-seconds`` (the RL agent trains for 75%
of it, then searches with its policy); the ONNX files go to ``--dir``, or to a
temporary folder that is removed at the end. docs/superopt.md says what the
agent learns in how much time.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch
from onnx.reference import ReferenceEvaluator

from tempo.superopt import cli, onnx_export, onnx_import
from tempo.superopt.execute import BACKENDS, time_interleaved
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.optimize import AGENTS
from tempo.superopt.reference import random_feeds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="squeezenet", choices=list(WORKLOADS))
    p.add_argument("--agents", nargs="+", default=["greedy", "backtrack", "rl"], choices=list(AGENTS))
    p.add_argument("--budget-seconds", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds")
    p.add_argument("--backend", default="torch", choices=list(BACKENDS),
                   help="where graphs are measured, searched and timed")
    p.add_argument("--dir", default=None,
                   help="where the ONNX files go (default: a temporary folder, removed at the end)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        return run(args, args.dir)
    with tempfile.TemporaryDirectory(prefix="superopt_") as folder:
        return run(args, folder)


def run(args: argparse.Namespace, folder: str) -> int:
    """Write the workload to ``folder``, optimise it with every agent, check and time them."""
    source = os.path.join(folder, f"{args.workload}.onnx")
    onnx_export.save(onnx_export.export_model(build(args.workload, scale="small")), source)
    graph, _, model = onnx_import.load(source)
    feeds = random_feeds(graph)
    expected = ReferenceEvaluator(model).run(None, feeds)
    graphs = {"input": graph}
    for agent in args.agents:
        target = os.path.join(folder, f"{args.workload}_{agent}.onnx")
        code = cli.main([source, "--output", target, "--agent", agent,
                         "--budget-seconds", str(args.budget_seconds), "--backend", args.backend])
        if code != 0:
            return code
        graphs[agent], _, written = onnx_import.load(target)
        got = ReferenceEvaluator(written).run(None, feeds)
        same = all(np.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(expected, got))
        print(f"{agent}: {target} computes the input's outputs: {same}")
        if not same:
            return 1
    latency = time_interleaved(graphs, rounds=args.rounds, backend=args.backend)
    print("\n| model | median ms | speed-up |\n|---|---|---|")
    for name, lat in latency.items():
        print(f"| {name} | {lat.median_ms:.4f} | {latency['input'].median_ms / lat.median_ms:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
