"""Dead-code elimination: drop every node no root depends on.

The roots (``sdg.roots``: fetched tensors, sinks, parameter and optimizer
updates) are what a program must compute; a node that no path of edges
leads to from a root is never executed, but still costs every later pass
and the scheduler a statement. With no roots at all (nothing fetched, no
sinks) every node counts as one, as the compiler computes everything then.
"""
from __future__ import annotations

from dataclasses import dataclass

from tempo.ir.sdg import SDG


@dataclass(frozen=True)
class Config:
    """Dead-code elimination has no options."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG restricted to the nodes some root reaches (``sdg`` itself when none is dead)."""
    live = reachable(sdg, list(sdg.roots) or list(sdg.nodes))
    if len(live) == len(sdg.nodes):
        return sdg
    return SDG({n: node for n, node in sdg.nodes.items() if n in live},
               [e for e in sdg.edges if e.sink in live and e.src in live], sdg._next_id,
               {n: dims for n, dims in sdg.vectorized.items() if n in live}, sdg.roots,
               {key: value for key, value in sdg.moved.items() if value[0] in live}, dict(sdg.tiles))


def reachable(sdg: SDG, roots: list[int]) -> set[int]:
    """The nodes some node of ``roots`` reads, directly or through others (the roots included)."""
    reads: dict[int, list[int]] = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        reads[e.sink].append(e.src)
    live, stack = set(roots), list(roots)
    while stack:
        for src in reads[stack.pop()]:
            if src not in live:
                live.add(src)
                stack.append(src)
    return live
