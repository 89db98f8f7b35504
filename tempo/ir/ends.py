"""Dims whose length is decided while the program runs (``tpo.end_when``).

A dim ``t`` ends at the first step where the flag of its ``tpo.end_when``
holds, once per point of the flag's other (outer) dims: ``T[i]`` is that
step plus one, capped by the bound the run gives ``T``. The program's
check of the flag is a host function node labelled :data:`END_LABEL` over
the flag's domain, whose last dim is the dim it ends.
"""
from __future__ import annotations

from tempo.ir.ops import FusedOp, UDFOp
from tempo.ir.sdg import SDG
from tempo.symbolic.expr import Expr, bound_of

END_LABEL = "end_when"  # the label of ``tpo.end_when``'s check node


def is_end(node) -> bool:
    """Whether ``node`` is the check of a ``tpo.end_when``."""
    return isinstance(node.op, UDFOp) and node.op.label == END_LABEL and bool(node.domain)


def ends(sdg: SDG) -> dict[Expr, int]:
    """Each dim a ``tpo.end_when`` ends -> its check node."""
    return {node.domain[-1]: n for n, node in sdg.nodes.items() if is_end(node)}


def outer_dims(sdg: SDG) -> dict[Expr, tuple[Expr, ...]]:
    """Each dim that ends at run time -> its outer dims (those its length ``T[i]`` varies over)."""
    return {t: sdg.nodes[n].domain[:-1] for t, n in ends(sdg).items()}


def depends_on_length(sdg: SDG, n: int, t: Expr) -> bool:
    """Whether node ``n``'s value or extent depends on the bound of ``t``: it reads a slice or a
    point given by it, has a shape or an op parameter that mentions it (a step of a fused island's
    included), or is vectorized over ``t``."""
    node, bound = sdg.nodes[n], bound_of(t)
    if any(d is t for d in sdg.vectorized.get(n, ())):
        return True
    exprs = [e.index for e in sdg.in_edges(n)] + [e.cond for e in sdg.in_edges(n) if e.cond is not None]
    exprs += [x for shape in node.shapes for x in shape if isinstance(x, Expr)]
    return any(bound in e.free_symbols() for e in exprs + list(_op_exprs(node.op)))


def _op_exprs(op):
    """The symbolic expressions among ``op``'s parameters; for a fused island, its steps' and their shapes'."""
    if isinstance(op, FusedOp):
        for step in op.steps:
            yield from _op_exprs(step.op)
            yield from (x for shape in step.shapes for x in shape if isinstance(x, Expr))
        return
    yield from op.exprs()
