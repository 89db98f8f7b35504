"""Constant folding: precompute every subgraph that depends only on weights.

Rewrites such as merging two matmuls leave ``concat(w1, w2)`` in the graph;
those nodes read no input, so they are computed once, before inference, as
X-RLflow's measurements do (§4.2: pre-processing ops without data
dependencies). The folded graph's new weights are named ``folded<i>``.
"""
from __future__ import annotations

import numpy as np

from tempo.superopt.graph import Graph, node
from tempo.superopt.reference import KERNELS, leaf_value


def fold_constants(graph: Graph) -> Graph:
    """``graph`` with each maximal weight-only subgraph replaced by one weight."""
    const = graph.constant_ids()
    values: dict[int, np.ndarray] = {}
    weights = dict(graph.weights)
    mapping = {}
    for n in graph.topo():
        if id(n) not in const:
            for s in n.src:
                if id(s) in const and s.op not in ("weight", "scalar") and id(s) not in mapping:
                    mapping[id(s)] = _as_weight(s, values, weights)
            continue
        if n.src:
            values[id(n)] = KERNELS[n.op](dict(n.attrs), *(values[id(s)] for s in n.src))
        else:
            values[id(n)] = leaf_value(n, {}, graph.weights)
    for o in graph.outputs:
        if id(o) in const and o.op not in ("weight", "scalar") and id(o) not in mapping:
            mapping[id(o)] = _as_weight(o, values, weights)
    folded = graph.replace(mapping)
    return folded.with_outputs(folded.outputs, weights)


def _as_weight(n, values, weights):
    name = f"folded{len(weights)}"
    weights[name] = values[id(n)].astype(np.float32)
    return node("weight", name=name, shape=n.shape)
