"""A float32 NumPy graph runner: the reference evaluator's kernels on float32 arrays.

Tempo's own runtime executes islands with NumPy, so the cost model that
decides how to rewrite an island times its operators here (the reference
evaluator computes in float64, which would time the wrong kernels).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tempo.superopt.graph import Graph
from tempo.superopt.reference import KERNELS


def compile_graph(graph: Graph) -> Callable[[Mapping[str, np.ndarray]], list]:
    """A function from input arrays to float32 output arrays that runs ``graph`` with NumPy."""
    steps, slot, env, inputs = [], {}, [], []
    for n in graph.topo():
        slot[id(n)] = len(env)
        env.append(None)
        if n.op == "input":
            inputs.append((slot[id(n)], n.attr("name")))
        elif n.op == "weight":
            env[-1] = np.asarray(graph.weights[n.attr("name")], np.float32)
        elif n.op == "scalar":
            env[-1] = np.float32(n.attr("value"))
        else:
            steps.append((KERNELS[n.op], dict(n.attrs), tuple(slot[id(s)] for s in n.src), slot[id(n)]))
    outs = [slot[id(o)] for o in graph.outputs]

    def run(feeds: Mapping[str, np.ndarray]) -> list:
        values = list(env)
        for index, name in inputs:
            values[index] = np.asarray(feeds[name], np.float32)
        for kernel, attrs, args, out in steps:
            values[out] = kernel(attrs, *(values[i] for i in args))
        return [values[i] for i in outs]

    return run
