"""Windows of a graph: small subgraphs to pre-train the RL agent on (a curriculum).

A window is a run of consecutive operators in topological order, cut out as
a graph of its own: values it reads from outside become inputs (of the same
shapes), values read outside it (or the graph's outputs) become its outputs,
and weights stay weights. On a window the agent sees few candidates and short
episodes, so a multi-step rewrite (enlarge, merge, drop the concat) is tried
far more often than on the whole graph; what it learns about a rule at a kind
of location carries over, because the policy scores a rewrite by the
embedding of the nodes it replaces.
"""
from __future__ import annotations

from tempo.superopt.graph import Graph, Node, node


def window(graph: Graph, ops: list[Node], name: str = "w") -> Graph:
    """The subgraph computing ``ops`` (a topologically ordered run of ``graph``'s operators)."""
    const = graph.constant_ids()
    inside = {id(n) for n in ops}
    made: dict[int, Node] = {}
    inputs: list[Node] = []
    for n in ops:
        srcs = []
        for s in n.src:
            if id(s) not in made and id(s) not in inside and id(s) not in const:
                made[id(s)] = node("input", name=f"{name}{len(inputs)}", shape=s.shape)
                inputs.append(made[id(s)])
            srcs.append(made.get(id(s), s))
        made[id(n)] = node(n.op, *srcs, **dict(n.attrs))
    users = graph.consumers()
    kept = {id(o) for o in graph.outputs}
    outputs = [made[id(n)] for n in ops
               if id(n) in kept or any(id(u) not in inside for u in users.get(id(n), []))]
    return Graph(tuple(inputs), tuple(outputs), graph.weights)


def windows(graph: Graph, size: int, stride: int | None = None) -> list[Graph]:
    """Windows of ``size`` operators every ``stride`` (default ``size // 2``) along the graph.

    Operators on weights only are left out (they are folded before a run);
    a graph with at most ``size`` operators gives no windows.
    """
    const = graph.constant_ids()
    ops = [n for n in graph.topo() if n.src and id(n) not in const]
    stride = stride or max(size // 2, 1)
    if len(ops) <= size:
        return []
    starts = range(0, len(ops) - size + stride, stride)
    return [window(graph, ops[i:i + size], f"w{i}_") for i in starts]
