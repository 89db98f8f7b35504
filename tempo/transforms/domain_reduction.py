"""Domain reduction (TEMPO §4.1): a node whose inputs do not vary over a dim loses that dim.

A node over ``(i, t)`` whose every input is read at points that do not
depend on ``t`` (and whose op parameters and shapes do not mention ``t``)
computes the same value at every ``t``: it is loop-invariant. It then runs
over ``(i,)`` only, and its readers read it without ``t``. This is
loop-invariant code motion: the node runs ``T`` times less often, and a
reader that loses its last varying input follows it on the next round,
until nothing changes.

Left alone: merges (recurrences and branches, whose conditions use the
dims), random numbers and ``eval_symbol`` (their values are the dims'),
UDFs (called once per point on purpose: an environment step, a sink),
constants indexed by the point, roots (a fetched tensor keeps the shape it
was fetched with; sinks and parameter updates are merges or UDFs anyway),
vectorized nodes, a node some reader reads with a slice along a dim it
would lose (that slice stacks one copy per point), and the outer dims of a
dim that ends at run time (``tpo.end_when``) in a node that keeps that dim:
its extent along the dim is ``T[i]``, one per point of them, where without
them it would be the cap.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tempo.ir import ops
from tempo.ir.ends import outer_dims
from tempo.ir.sdg import SDG, Node
from tempo.symbolic.expr import Expr, seq
from tempo.transforms.editing import Graph, sources_first

KEEP = (ops.MergeOp, ops.RandomOp, ops.EvalSymbolOp, ops.UDFOp, ops.FusedOp)


@dataclass(frozen=True)
class Config:
    """Domain reduction has no options."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every node over just the dims it varies with (``sdg`` itself if none shrinks)."""
    g = Graph(sdg)
    outer = outer_dims(sdg)
    work = sources_first(g)
    queued, reduced = set(work), 0
    while work:
        n = work.pop()
        queued.discard(n)
        if _reduce(g, g.nodes[n], outer):
            reduced += 1
            for e in g.readers(n):
                if e.sink not in queued:
                    work.append(e.sink)
                    queued.add(e.sink)
    return g.to_sdg() if reduced else sdg


def _reduce(g: Graph, node: Node, outer: dict[Expr, tuple]) -> bool:
    if isinstance(node.op, KEEP) or g.is_root(node.id) or node.id in g.vectorized or not node.domain:
        return False
    if isinstance(node.op, ops.ConstOp) and node.op.num_domain_axes:
        return False
    used = varies_with(g, node)
    used |= {d for t, dims in outer.items() if t in used for d in dims}
    keep = tuple(d for d in node.domain if d in used)
    if len(keep) == len(node.domain):
        return False
    kept = [k for k, d in enumerate(node.domain) if d in used]
    readers = g.readers(node.id)
    for e in readers:
        if any(item.op == "slice" for k, item in enumerate(e.index.args) if k not in kept):
            return False
    g.set_node(replace(node, domain=keep))
    for e in readers:
        g.connect(replace(e, index=seq(*(e.index.args[k] for k in kept))))
    return True


def varies_with(g: Graph, node: Node) -> set[Expr]:
    """The step symbols ``node``'s inputs, conditions, op parameters and shapes mention."""
    exprs: list[Expr] = []
    for e in g.inputs(node.id):
        exprs += [e.index] + ([e.cond] if e.cond is not None else [])
    exprs += node.op.exprs()
    exprs += [s for shape in node.shapes for s in shape if isinstance(s, Expr)]
    steps: set[Expr] = set()
    for x in exprs:
        steps |= {s for s in x.free_symbols() if s.kind == "step"}
    return steps
