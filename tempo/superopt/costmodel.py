"""TASO's cost model: a graph costs the sum of its operators' measured run times.

Each distinct operator (op, attributes, input shapes) is timed once on its own
on ``backend`` (the default backend unless given) and cached. Weight-only
operators cost nothing: they are constant-folded before inference. The model
ignores everything between operators (memory traffic, launch overlap), which
is why X-RLflow measures whole graphs instead.
"""
from __future__ import annotations

from tempo.superopt.graph import Graph, GraphBuilder, Node, node
from tempo.superopt.latency import time_runs


class CostModel:
    """Per-operator latencies measured on demand, cached by operator signature."""

    def __init__(self, repeats: int = 5, backend: str | None = None):
        self.repeats = repeats
        self.backend = backend
        self.cache: dict[tuple, float] = {}

    def op_cost(self, n: Node) -> float:
        """Measured milliseconds of ``n`` run alone on inputs of its sources' shapes."""
        key = (n.op, n.attrs, tuple(s.shape for s in n.src), tuple(s.op == "input" for s in n.src))
        if key not in self.cache:
            self.cache[key] = self._measure(n)
        return self.cache[key]

    def _measure(self, n: Node) -> float:
        from tempo.superopt.execute import compile_graph
        from tempo.superopt.reference import random_feeds

        b = GraphBuilder(0)
        srcs = [b.input(f"i{i}", s.shape) if s.op != "scalar" else s for i, s in enumerate(n.src)]
        g = b.build([node(n.op, *srcs, **dict(n.attrs))])
        fn = compile_graph(g, self.backend)
        feeds = random_feeds(g)
        return time_runs(lambda: fn(feeds), warmup=1, repeats=self.repeats).median_ms

    def cost(self, graph: Graph) -> float:
        """Sum of the costs of the graph's operators that read an input."""
        const = graph.constant_ids()
        return sum(self.op_cost(n) for n in graph.topo()
                   if n.src and id(n) not in const and n.op != "opaque")
