"""Activation caching (TEMPO §7.3): the learner reads the activations the actor computed.

An RL learner replays, over the whole batch, the forward pass its actor
already ran point by point: PPO's loss evaluates ``actor(o[0:B, i, 0:T])``
with the parameters of update ``i``, while acting evaluated ``actor(o[b, i, t])``
with the same parameters at every ``(b, t)``. Written as it is, the learner
computes every activation twice.

Pointwise and per-sample ops commute with temporal slicing:
``f(u[0:B, i, 0:T], p[i])`` equals ``f(u, p)[0:B, i, 0:T]`` when ``f`` treats
the leading ``(B, T)`` axes as a batch (elementwise ops, a matrix product
with the batch on the left, reductions and reshapes of the trailing axes).
The pass rewrites each learner node that reads slices this way into a
slice read of the per-point node, and only where that per-point node
already exists, computed by the actor: then the learner's node goes, its
readers (the next layer, and the backward pass, which needs the
activations) read the actor's values, and the next layer becomes a
candidate in turn. Where no actor node matches, nothing changes, so the
pass never moves work. The stores give the slice read as a view of the
actor's buffer (block store), so caching costs no copy.

The slices must cover whole dims (``0:B``, ``0:T``) and the learner must read
every other dim at its own point: a learner at ``i`` reading the batch of
``k = (i // E) * E`` (PPO with ``E > 1`` updates per batch) uses parameters
other than the actor's at all but the first update and is left as it is.

Under a device budget, caching is one of three options per activation
(beyond TEMPO, which always keeps them): an activation whose batch fits
:data:`KEEP_SHARE` of the budget is kept on the device; a larger one is
either kept and swapped (the executor evicts it to the host tier as acting
writes it and loads it back for the learner: it crosses the host link
twice) or recomputed by the learner (its op over the batch, from inputs the
learner reads anyway), whichever :class:`Costs` says takes less time. On a
GPU the link is slow next to the device, so cheap layers are recomputed;
on a CPU the host tier is the same memory, so everything is kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import normalize_axis, same_size
from tempo.symbolic.evaluate import evaluate
from tempo.symbolic.expr import Expr, bound_of, seq
from tempo.transforms.editing import Graph, Read, same_dims, sources_first


@dataclass(frozen=True)
class Costs:
    """The cost model that chooses between swapping and recomputing an activation.

    A swapped activation crosses the host link twice (``link_bytes`` bytes/s); a
    recomputed one costs its op over the batch: its FLOPs at ``device_flops`` or the
    bytes it reads and writes at ``device_bytes``, whichever takes longer.
    """

    device_flops: float
    device_bytes: float
    link_bytes: float

    def swap_seconds(self, nbytes: float) -> float:
        return 2 * nbytes / self.link_bytes

    def recompute_seconds(self, flops: float, nbytes: float) -> float:
        return max(flops / self.device_flops, nbytes / self.device_bytes)


# Per device kind. A CPU core: float32 matmul rate and memory bandwidth, its host tier the
# same memory. A GPU (H100-class): float32 rate, HBM bandwidth, and PCIe 5.0 x16 to the host.
COSTS = {"cpu": Costs(device_flops=1e11, device_bytes=1e10, link_bytes=1e10),
         "gpu": Costs(device_flops=5e13, device_bytes=3e12, link_bytes=5e10)}

# An activation whose batch holds at most this share of the device budget is kept.
KEEP_SHARE = 1 / 8


@dataclass(frozen=True)
class Config:
    """Without a ``device_budget`` (bytes) every activation the actor computed is cached.

    With one and the run's ``bounds`` (bound name -> value), an activation whose batch
    holds more than :data:`KEEP_SHARE` of the budget is cached only where ``costs`` says
    swapping it takes less time than recomputing it.
    """

    device_budget: int | None = None
    bounds: dict | None = None
    costs: Costs = COSTS["cpu"]

    def keeps(self, nbytes: float, flops: float, touched: float) -> bool:
        """Whether an activation of ``nbytes`` over the batch is cached rather than recomputed
        by an op of ``flops`` that reads and writes ``touched`` bytes."""
        if self.device_budget is None or nbytes <= self.device_budget * KEEP_SHARE:
            return True
        return self.costs.swap_seconds(nbytes) <= self.costs.recompute_seconds(flops, touched)


# (op, rank of each input per point, which inputs are sliced, leading axes) -> the per-point op, or None
PointRule = Callable[[ops.Op, list[int], list[bool], int], ops.Op | None]
RULES: dict[type, PointRule] = {}


def rule(*op_types: type):
    def register(fn: PointRule) -> PointRule:
        for op_type in op_types:
            RULES[op_type] = fn
        return fn

    return register


@rule(ops.ElementwiseOp)
def _elementwise(op, ranks, sliced, lead):
    rank = max(ranks)  # broadcasting aligns trailing axes: every sliced input must span them all
    if any(s and r != rank for r, s in zip(ranks, sliced)):
        return None
    return op


@rule(ops.MatMulOp)
def _matmul(op, ranks, sliced, lead):
    (ra, rb), (sa, sb) = ranks, sliced
    if sa and sb:
        return op if ra >= 2 and rb >= 2 else None
    if sa:
        return op if rb == 2 else None  # a stack of rows or matrices times one matrix
    return op if ra <= 2 and rb == 2 else None


def _point_axis(axis: int, rank: int, lead: int) -> int | None:
    """``axis`` of a batched tensor of ``rank`` axes (``lead`` of them leading) as an axis of one
    point; None when it is a leading axis. A negative axis counts from the end in both."""
    if axis < 0:
        return axis if normalize_axis(axis, rank) >= lead else None
    return axis - lead if axis >= lead else None


@rule(ops.ReduceOp)
def _reduce(op, ranks, sliced, lead):
    axes = tuple(_point_axis(a, ranks[0] + lead, lead) for a in op.axes)
    return None if None in axes or not axes else replace(op, axes=axes)


@rule(ops.SqueezeOp)
def _squeeze(op, ranks, sliced, lead):
    axis = _point_axis(op.axis, ranks[0] + lead, lead)
    return None if axis is None else replace(op, axis=axis)


@rule(ops.UnsqueezeOp)
def _unsqueeze(op, ranks, sliced, lead):
    axis = _point_axis(op.axis, ranks[0] + lead + 1, lead)
    return None if axis is None else replace(op, axis=axis)


@rule(ops.CastOp, ops.IdentOp)
def _same(op, ranks, sliced, lead):
    return op


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every learner node that recomputes an actor node reading it instead
    (``sdg`` itself if none does)."""
    g = Graph(sdg)
    computed = {_key(node.op, node.domain, node.shapes, node.dtypes, g.inputs(n)): n
                for n, node in g.nodes.items() if type(node.op) in RULES and n not in g.vectorized}
    work, cached = sources_first(g), 0
    while work:
        n = work.pop()
        if n in g.nodes and _reuse(g, g.nodes[n], computed, cfg):
            cached += 1
    return g.to_sdg() if cached else sdg


def _key(op: ops.Op, domain, shapes, dtypes, inputs) -> tuple:
    return (op, domain, shapes, dtypes, tuple((e.src, e.src_out, e.index, e.cond) for e in inputs))


def _reuse(g: Graph, node: Node, computed: dict, cfg: Config) -> bool:
    """Send ``node``'s readers to the actor node it recomputes, if there is one and ``cfg``
    keeps it."""
    rule_fn = RULES.get(type(node.op))
    if rule_fn is None or g.is_root(node.id) or node.id in g.vectorized or len(node.shapes) != 1:
        return False
    inputs = g.inputs(node.id)
    slicing = _slicing(g, node, inputs)
    if slicing is None:
        return False
    point_domain, whole = slicing
    lead = len(whole)
    shape = node.shapes[0]
    if len(shape) < lead or not all(same_size(s, bound_of(d)) for s, d in zip(shape, whole)):
        return False
    sliced = [_reads_slice(e) for e in inputs]
    ranks = [len(g.read_shape(e)) - (lead if s else 0) for e, s in zip(inputs, sliced)]
    point_op = rule_fn(node.op, ranks, sliced, lead)
    if point_op is None:
        return False
    here = seq(*point_domain)
    reads = [replace(e, index=here) if s else e for e, s in zip(inputs, sliced)]
    actor = computed.get(_key(point_op, point_domain, (shape[lead:],), node.dtypes, reads))
    if actor is None or not _kept(g, node, inputs, cfg):
        return False
    index = next(e.index for e, s in zip(inputs, sliced) if s)
    if not g.replace_uses(node.id, {0: Read(actor, 0, index)}):
        return False
    g.remove(node.id)
    return True


def _kept(g: Graph, node: Node, inputs: list[Edge], cfg: Config) -> bool:
    """Whether ``cfg`` caches the batch ``node`` computes (see :meth:`Config.keeps`)."""
    if cfg.device_budget is None or cfg.bounds is None:
        return True

    def elements(shape) -> int | None:
        sizes = [evaluate(x, cfg.bounds) if isinstance(x, Expr) else x for x in shape]
        return math.prod(sizes) if all(isinstance(x, (int, np.integer)) for x in sizes) else None

    out = elements(node.shapes[0])
    ins = [elements(g.read_shape(e)) for e in inputs]
    if out is None or None in ins:
        return True
    itemsize = np.dtype(node.dtypes[0]).itemsize
    touched = (out + sum(ins)) * itemsize
    flops = FLOPS.get(type(node.op), lambda op, out, ins, shapes: 0)(node.op, out, ins,
                                                                    [g.read_shape(e) for e in inputs])
    return cfg.keeps(out * itemsize, flops, touched)


# Per op type, the FLOPs of recomputing it over the batch: (op, output elements, input
# elements, input shapes) -> FLOPs. An op type missing here moves data only.
FLOPS: dict[type, Callable] = {
    ops.ElementwiseOp: lambda op, out, ins, shapes: out,
    ops.ReduceOp: lambda op, out, ins, shapes: ins[0],
    ops.MatMulOp: lambda op, out, ins, shapes: 2 * out * shapes[0][-1],
}


def _slicing(g: Graph, node: Node, inputs: list[Edge]) -> tuple[tuple[Expr, ...], tuple[Expr, ...]] | None:
    """``(the actor's domain, the dims read whole)`` when every sliced input of ``node`` reads
    one actor domain with the same whole-dim slices and ``node``'s own dims at its point, and
    no input reads a slice otherwise; None when not."""
    found = None
    for e in inputs:
        if e.cond is not None:
            return None
        if not _reads_slice(e):
            continue
        domain = g.nodes[e.src].domain
        whole = tuple(d for d, item in zip(domain, e.index.args) if item.op == "slice")
        if not _whole_slices(e, domain) or (found is not None and not (same_dims(found[0], domain)
                                                                        and same_dims(found[1], whole))):
            return None
        found = (domain, whole)
    if found is None or not same_dims(tuple(d for d in found[0] if not any(d is w for w in found[1])), node.domain):
        return None
    return found


def _reads_slice(e: Edge) -> bool:
    return any(item.op == "slice" for item in e.index.args)


def _whole_slices(e: Edge, domain: tuple[Expr, ...]) -> bool:
    """Whether ``e`` reads each dim of ``domain`` whole (from 0 to its bound) or at its own point."""
    for d, item in zip(domain, e.index.args):
        if item.op == "slice":
            start, stop = item.args
            if not same_size(start, 0) or not same_size(stop, bound_of(d)):
                return False
        elif item is not d:
            return False
    return True
