"""Duplicate-code elimination: nodes that compute the same value become one.

Two nodes are the same when they have equal ops, domains, output shapes
and dtypes, vectorized dims, and equal inputs: port by port the same
output of the same (merged) source, at the same index expression under the
same condition. Graphs with recurrences have cycles, so "the same source"
cannot be settled source-first as in plain hash-consing; the pass finds the
coarsest partition of the nodes that respects this rule (partition
refinement, as in DFA minimisation): it starts from classes of nodes that
agree on everything but their sources and splits a class while two of its
members read sources of different classes, until no class splits. Each
class then becomes one node: its readers read the representative, and its
values are forwarded for fetches. Two optimizer step counters ``c[i + 1] =
c[i] + 1`` started at 0 are merged this way, with everything computed
from them (Adam's bias corrections for every parameter).

Only pure ops merge: a ``RandomOp`` is a draw of its own and a ``UDFOp`` may
have side effects (an environment step, a progress bar), so neither ever
does. Constants up to :data:`DIGEST_BYTES` compare by content (shape, dtype
and a digest of their bytes), not by the identity of their arrays; larger ones
(a model's stacked weights) by identity, so that compiling does not read every
weight (hashing 32 layers' weights took longer than the rest of the compile). A root represents its class
where there is one; another root of the class is forwarded to it (a fetch
of either reads the one left).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tempo.ir import ops
from tempo.ir.sdg import SDG, Node
from tempo.symbolic.expr import const, seq
from tempo.transforms.editing import Graph, Read

IMPURE = (ops.RandomOp, ops.UDFOp)
ALWAYS = const(True)  # an input without a condition: keys never compare None with an expression


@dataclass(frozen=True)
class Config:
    """Duplicate-code elimination has no options."""


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every class of identical pure nodes merged into one (``sdg`` itself if none)."""
    g = Graph(sdg)
    merged = 0
    for members in classes(g):
        merged += _merge(g, members)
    return g.to_sdg() if merged else sdg


def classes(g: Graph) -> list[list[int]]:
    """The classes of two or more nodes that compute the same values (see the module docstring)."""
    inputs = {n: g.inputs(n) for n in g.nodes}
    label = _numbering({n: _own_key(g, node, inputs[n]) for n, node in g.nodes.items()})
    count = len(set(label.values()))
    while True:
        label = _numbering({n: (label[n], tuple(label[e.src] for e in inputs[n])) for n in g.nodes})
        if len(set(label.values())) == count:
            break
        count = len(set(label.values()))
    groups: dict[int, list[int]] = {}
    for n in g.nodes:
        groups.setdefault(label[n], []).append(n)
    return [members for members in groups.values() if len(members) > 1]


def _numbering(keys: dict[int, object]) -> dict[int, int]:
    numbers: dict[object, int] = {}
    return {n: numbers.setdefault(key, len(numbers)) for n, key in keys.items()}


def _own_key(g: Graph, node: Node, edges) -> tuple:
    """Everything two nodes must share but their sources (impure nodes: themselves)."""
    if isinstance(node.op, IMPURE):
        return ("impure", node.id)
    ports = tuple((e.src_out, e.index, ALWAYS if e.cond is None else e.cond) for e in edges)
    return (_op_key(node.op), node.domain, node.shapes, node.dtypes, g.vectorized.get(node.id, ()), ports)


DIGEST_BYTES = 1 << 20  # larger constants compare by the identity of their arrays


def _op_key(op: ops.Op):
    if isinstance(op, ops.ConstOp):
        array = op.value.array
        content = (("array", id(array)) if array.nbytes > DIGEST_BYTES
                   else hashlib.blake2b(array.tobytes(), digest_size=16).hexdigest())
        return ("const", array.shape, str(array.dtype), content, op.num_domain_axes)
    return op


def _merge(g: Graph, members: list[int]) -> int:
    """Send the readers of every member to one representative; returns how many members went."""
    roots = [n for n in members if g.is_root(n)]
    keep = roots[0] if roots else min(members)
    merged = 0
    for n in members:
        if n == keep:
            continue
        node = g.nodes[n]
        here = seq(*node.domain)
        if g.replace_uses(n, {out: Read(keep, out, here) for out in range(len(node.shapes))}):
            g.remove(n)
            merged += 1
    return merged
