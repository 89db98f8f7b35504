"""Contraction: a sum of a batch of matrix products becomes one matrix product.

A gradient is a sum of contributions, one per point that read the
parameter: for a weight ``W`` used as ``x[b, t] @ W``, autodiff writes
``dW = sum over (b, t) of x[b, t]^T @ g[b, t]``. Once vectorization has
batched ``b`` and ``t``, that is a batched product ``(B, T, m, 1) @ (B, T,
1, n)`` of size ``B * T * m * n`` followed by a sum over ``(B, T)``: for
REINFORCE at 512 environments and 250 steps, a parameter-sized tensor for
every one of 128,000 points. Summing over the batch axes of a product is
the same as contracting them with its inner axis, so the pair becomes one
contraction (``BatchContractOp``: an ``(m, B*T*k) @ (B*T*k, n)`` product on
NumPy), one BLAS call that stores nothing per point.

A sum node is rewritten when it reads, through permutations of the batch
axes only, a matrix product (each with no other reader) whose operands
have equal batch shapes, and it sums exactly the product's batch axes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node, identity_index
from tempo.ir.shapes import same_size
from tempo.transforms import dce


@dataclass(frozen=True)
class Config:
    """Contraction has no options: every sum of a batch of products that matches is rewritten."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each matching sum of batched matrix products turned into one product."""
    ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}
    readers: dict[int, int] = {n: 0 for n in sdg.nodes}
    for e in sdg.edges:
        ins[e.sink].append(e)
        readers[e.src] += 1
    for edges in ins.values():
        edges.sort(key=lambda e: e.sink_in)
    matches = {n: m for n, node in sdg.nodes.items() if (m := _match(sdg, node, ins, readers)) is not None}
    if not matches:
        return sdg
    new = SDG(dict(sdg.nodes), [e for e in sdg.edges if e.sink not in matches], sdg._next_id,
              dict(sdg.vectorized), sdg.roots, dict(sdg.moved), dict(sdg.tiles))
    for n, product in matches.items():
        _contract(new, sdg.nodes[n], ins[product])
    return dce.apply(new)  # the replaced products and permutations: left unread, fusion would compute them


def _identity(e: Edge, src: Node, sink: Node) -> bool:
    return e.cond is None and src.domain == sink.domain and e.index is identity_index(src.domain)


def _match(sdg: SDG, node: Node, ins: dict[int, list[Edge]], readers: dict[int, int]) -> int | None:
    """The product that ``node`` sums over its batch axes, if it is one (see the module docstring)."""
    op = node.op
    if not (isinstance(op, ops.ReduceOp) and op.fn == "sum" and not op.keepdims and len(ins[node.id]) == 1):
        return None
    axes = list(range(len(sdg.nodes[ins[node.id][0].src].shapes[0])))  # node's input axis -> product axis
    e = ins[node.id][0]
    while True:
        src = sdg.nodes[e.src]
        if not _identity(e, src, node) or readers[src.id] != 1 or src.op.num_outputs != 1:
            return None
        if isinstance(src.op, ops.MatMulOp):
            break
        if not isinstance(src.op, ops.PermuteOp) or len(ins[src.id]) != 1:
            return None
        axes = [src.op.axes[a] for a in axes]
        e = ins[src.id][0]
    a, b = (sdg.read_shape(x) for x in ins[src.id])
    rank = len(src.shapes[0])
    if rank < 3 or len(a) != rank or len(b) != rank or not all(same_size(x, y) for x, y in zip(a[:-2], b[:-2])):
        return None
    summed = {a_ % rank for a_ in op.axes}
    kept = [axes[k] for k in range(rank) if k not in summed]
    if {axes[k] for k in summed} != set(range(rank - 2)) or kept != [rank - 2, rank - 1]:
        return None
    return src.id


def _contract(new: SDG, node: Node, operands: list[Edge]) -> None:
    """Make ``node`` the contraction of the summed product's operands over their batch axes."""
    new.nodes[node.id] = replace(node, op=ops.BatchContractOp())
    for k, e in enumerate(operands):
        new.add_edge(replace(e, sink=node.id, sink_in=k))
