"""A float32 NumPy graph runner: the reference evaluator's kernels on float32 arrays.

Tempo's own runtime executes islands with NumPy, so the cost model that
decides how to rewrite an island times its operators here (the reference
evaluator computes in float64, which would time the wrong kernels).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tempo.superopt.graph import Graph, run_plan
from tempo.superopt.reference import KERNELS


def compile_graph(graph: Graph) -> Callable[[Mapping[str, np.ndarray]], list]:
    """A function from input arrays to float32 output arrays that runs ``graph`` with NumPy."""
    plan = run_plan(graph, KERNELS, lambda array: array)

    def run(feeds: Mapping[str, np.ndarray]) -> list:
        values = list(plan.values)
        for index, name in plan.inputs:
            values[index] = np.asarray(feeds[name], np.float32)
        for kernel, attrs, args, out in plan.steps:
            values[out] = kernel(attrs, *(values[i] for i in args))
        return [values[i] for i in plan.outputs]

    return run
