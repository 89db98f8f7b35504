"""TASO's cost model: a graph costs the sum of its operators' measured run times.

Each distinct operator (op, attributes, input shapes) is timed once on its own
on ``backend`` (the default backend unless given) and cached. It is timed
cycle by cycle beside a fixed reference kernel (a 32x32 matmul), and costs the
reference's latency, measured once per model, times the ratio of the
operator's fastest run to the reference's fastest run: other load only ever
adds time to a run, so the fastest runs are the least disturbed. Timed alone
at different moments, one operator came out up to 2x apart between fresh
models; the median of the cycle-paired ratios instead lets a large operator
slow the reference run that follows it (it ranked a 512x512 matmul at half the
multiple of a 16x16 one that the fastest runs give; measured at commit b5010af
by the script ``git show b5010af:benchmarks/superopt_costmodel_spread.py`` prints).

Weight-only operators cost nothing: they are constant-folded before
inference. With ``fold_weights=False`` they are charged like every other
operator: TASO's sum as X-RLflow describes it ("cost modelling does not
consider constant folding because it simply sums over all operators'
execution times", §4.2), which prices a rewrite that moves work onto the
weights (folding a batch norm into its convolution) as more work. The model
ignores everything between operators (memory traffic, launch overlap), which
is why X-RLflow measures whole graphs instead.
"""
from __future__ import annotations

from tempo.superopt.graph import Graph, GraphBuilder, Node, node
from tempo.superopt.latency import time_runs

REFERENCE_SHAPE = (32, 32)      # the reference kernel: a matmul of two such matrices


class CostModel:
    """Per-operator latencies measured on demand, cached by operator signature."""

    def __init__(self, repeats: int = 5, backend: str | None = None, fold_weights: bool = True):
        self.repeats = repeats
        self.backend = backend
        self.fold_weights = fold_weights
        self.cache: dict[tuple, float] = {}
        self._reference: tuple | None = None      # (call, its median ms), made on first use
        # per node (nodes are hash-consed and immutable): whether it depends on no input, and
        # what it adds to a graph's cost; a search prices thousands of graphs sharing most nodes
        self._constant: dict[Node, bool] = {}
        self._charge: dict[Node, float] = {}

    def op_cost(self, n: Node) -> float:
        """Measured milliseconds of ``n`` run alone on inputs of its sources' shapes."""
        key = (n.op, n.attrs, tuple(s.shape for s in n.src), tuple(s.op == "input" for s in n.src))
        if key not in self.cache:
            self.cache[key] = self._measure(n)
        return self.cache[key]

    def _call(self, g: Graph):
        """A call that runs ``g`` compiled on the model's backend, on fixed random inputs."""
        from tempo.superopt.execute import compile_graph
        from tempo.superopt.reference import random_feeds

        fn, feeds = compile_graph(g, self.backend), random_feeds(g)
        return lambda: fn(feeds)

    def reference(self) -> tuple:
        """The reference kernel's call and its median latency (50 runs), made on first use."""
        if self._reference is None:
            b = GraphBuilder(0)
            call = self._call(b.build([node("matmul", b.input("x", REFERENCE_SHAPE),
                                            b.weight(REFERENCE_SHAPE))]))
            self._reference = (call, time_runs(call, warmup=3, repeats=50).median_ms)
        return self._reference

    def _measure(self, n: Node) -> float:
        from tempo.superopt.execute import time_calls

        b = GraphBuilder(0)
        srcs = [b.input(f"i{i}", s.shape) if s.op != "scalar" else s for i, s in enumerate(n.src)]
        call = self._call(b.build([node(n.op, *srcs, **dict(n.attrs))]))
        reference, reference_ms = self.reference()
        lat = time_calls({"op": [call], "ref": [reference]}, rounds=1, repeats=self.repeats)
        return reference_ms * lat["op"].min_ms / lat["ref"].min_ms

    def cost(self, graph: Graph) -> float:
        """Sum of the costs of the graph's operators that read an input (with ``fold_weights``
        off: of all its operators)."""
        total = 0.0
        for n in graph.topo():      # sources first: their entries exist when a node is priced
            charge = self._charge.get(n)
            if charge is None:
                constant = n.op in ("weight", "scalar") or (
                    bool(n.src) and n.op != "opaque" and all(self._constant[s] for s in n.src))
                self._constant[n] = constant
                folded = constant and self.fold_weights
                charge = self._charge[n] = (self.op_cost(n) if n.src and not folded
                                            and n.op != "opaque" else 0.0)
            total += charge
        return total
