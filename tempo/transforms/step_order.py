"""Step order: sums and products over the steps of a loop dim are marked to run in step order.

A dim the program loops over (one whose points depend on one another: the
``t`` of an episode, the ``i`` of training, a dim that ends at run time)
may end at ``T[i]`` (``tpo.end_when``) or run to a cap with the steps past
the end masked to 0. The two hold the same values at the steps both have,
but a sum over ``T[i]`` rows and the same sum over the cap's rows round
apart when the backend groups the terms by how many there are (NumPy's
pairwise sums, BLAS's blocking), and the runs part once that flips a sampled
action. So this pass marks each sum, mean, discounted sum and product whose
axes hold a loop dim's steps up to the dim's end (a slice whose end mentions
the dim's bound, ``x[0:T]``, ``r[t:T]``, ``r[t:min(t + 8, T)]``, or a whole
dim that vectorization made an axis; not ``k[0:t + 1]``, whose extent does
not depend on where the dim ends), and a backend that honours the marks
(:mod:`tempo.runtime.backends.numpy_ordered`) adds the steps one after
another, from zero: steps past the end that hold 0 then change nothing, and
the ended and the padded program agree bit for bit. A dim vectorized whole
(a batch dim ``b``, whose points are independent) is no loop, and sums over
it keep the backend's fastest order.

The pass runs after vectorization, contraction and tiling, which settle
each op's axes, and before fusion. It follows each axis from where it is
made to the ops that reduce it: a slice of an edge's index makes one axis
per sliced dim, vectorization makes a node's leading axes its vectorized
dims, and a rule per op type (:data:`AXIS_RULES`) carries the axes through
the op; an axis no rule follows is no dim's, and what reduces it is left
as it is.

Where the marks are made is the backend's and the user's choice
(:class:`Config`). NumPy, the reference, marks every program (its ordered
kernels cost a padded RL learner's iteration about 4%); torch's and JAX's
cost it 6% and 16% (``benchmarks/step_order_cost.py``), so there the pass
marks only a program with a dim that ends at run time (``tpo.end_when``),
and every program where ``tpo.Config(step_order="exact")`` asks (a padded
twin that must give an ended program's bits).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from tempo.ir import ops
from tempo.ir.ends import ends
from tempo.ir.sdg import SDG, Edge, identity_index
from tempo.ir.shapes import normalize_axis, same_size
from tempo.symbolic.expr import Expr, bound_of

Axes = tuple  # one entry per axis of a value: the dim (step symbol) whose steps it holds, or None


@dataclass(frozen=True)
class Config:
    """``everywhere``: mark the sums and products over a loop dim's steps in every program (True),
    or only in a program with a dim that ends at run time (False: the others keep the backend's
    fastest kernels)."""

    everywhere: bool = True


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each sum and product over a loop dim's steps marked to run in step order."""
    loops = {d for node in sdg.nodes.values() for d in node.domain}
    if not loops or not (cfg.everywhere or ends(sdg)):
        return sdg
    axes = step_axes(sdg)
    marked = {}
    for n, node in sdg.nodes.items():
        mark = MARKS.get(type(node.op))
        if mark is not None:
            op = mark(node.op, [read_axes(sdg, e, axes) for e in sdg.in_edges(n)], loops)
            if op is not node.op:
                marked[n] = replace(node, op=op)
    if not marked:
        return sdg
    return SDG({n: marked.get(n, node) for n, node in sdg.nodes.items()}, list(sdg.edges), sdg._next_id,
               dict(sdg.vectorized), sdg.roots, dict(sdg.moved), dict(sdg.tiles))


def step_axes(sdg: SDG) -> dict[tuple[int, int], Axes]:
    """(node, output) -> the dim of each axis of that output (None where no dim's)."""
    axes: dict[tuple[int, int], Axes] = {}
    for n in _order(sdg):
        node = sdg.nodes[n]
        reads = [read_axes(sdg, e, axes) for e in sdg.in_edges(n)]
        rule = AXIS_RULES.get(type(node.op))
        outs = rule(node.op, reads, node.shapes, [sdg.read_shape(e) for e in sdg.in_edges(n)]) if rule else None
        lead = sdg.vectorized.get(n, ())
        for k, shape in enumerate(node.shapes):
            found = list(outs[k]) if outs is not None and len(outs[k]) == len(shape) else [None] * len(shape)
            for j, d in enumerate(lead[:len(shape)]):
                found[j] = d if found[j] is None else found[j]
            axes[(n, k)] = tuple(found)
    return axes


def read_axes(sdg: SDG, e: Edge, axes: dict) -> Axes:
    """The dims of the axes of what ``e`` reads: one per slice of its index (the dim where the
    slice runs to the dim's end: its extent then depends on where the dim ends), then the source's."""
    src = sdg.nodes[e.src]
    sliced = tuple((d if bound_of(d) in item.args[1].free_symbols() else None)
                   for d, item in zip(src.domain, e.index.args) if item.op == "slice")
    own = axes.get((e.src, e.src_out), (None,) * len(src.shapes[e.src_out]))
    return sliced + own


def _order(sdg: SDG) -> list[int]:
    """The nodes, each after the nodes it reads, but for a MergeOp's reads of another point
    (the earlier step of a recurrence or of the state over ``i``), which close the cycles."""
    reads: dict[int, set[int]] = {n: set() for n in sdg.nodes}
    for e in sdg.edges:
        sink = sdg.nodes[e.sink]
        if not isinstance(sink.op, ops.MergeOp) or e.index is identity_index(sink.domain):
            reads[e.sink].add(e.src)
    done: set[int] = set()
    order: list[int] = []
    for root in sorted(sdg.nodes):
        stack = [(root, iter(sorted(reads[root])))]
        on_stack = {root}
        while stack:
            n, pending = stack[-1]
            nxt = next((s for s in pending if s not in done and s not in on_stack), None)
            if nxt is None:
                stack.pop()
                on_stack.discard(n)
                if n not in done:
                    done.add(n)
                    order.append(n)
            else:
                on_stack.add(nxt)
                stack.append((nxt, iter(sorted(reads[nxt]))))
    return order


# ----- how each op carries its inputs' axes to its outputs -----
AxisRule = Callable[[ops.Op, list[Axes], tuple, list[tuple]], list[Axes]]
AXIS_RULES: dict[type, AxisRule] = {}


def axis_rule(*op_types: type):
    def register(fn: AxisRule) -> AxisRule:
        for op_type in op_types:
            AXIS_RULES[op_type] = fn
        return fn

    return register


def _aligned(reads: list[Axes], rank: int) -> Axes:
    """Inputs broadcast against one another (aligned at the right): each axis's first dim."""
    out = []
    for j in range(rank):
        found = [r[len(r) - rank + j] for r in reads if len(r) - rank + j >= 0]
        out.append(next((d for d in found if d is not None), None))
    return tuple(out)


@axis_rule(ops.ElementwiseOp)
def _elementwise(op, reads, shapes, ins):
    return [_aligned(reads, len(shapes[0]))]


@axis_rule(ops.CastOp, ops.IdentOp, ops.CumSumOp, ops.ScanOp, ops.LinearScanOp, ops.ArgSortOp, ops.PadOp,
           ops.CatOp, ops.MergeOp)
def _same(op, reads, shapes, ins):
    return [reads[0]] if reads else None


@axis_rule(ops.ReduceOp)
def _reduce(op, reads, shapes, ins):
    rank = len(reads[0])
    gone = {normalize_axis(a, rank) for a in op.axes}
    if op.keepdims:
        return [tuple(None if k in gone else d for k, d in enumerate(reads[0]))]
    return [tuple(d for k, d in enumerate(reads[0]) if k not in gone)]


@axis_rule(ops.DiscountedSumOp)
def _discounted_sum(op, reads, shapes, ins):
    gone = normalize_axis(op.axis, len(reads[0]))
    return [tuple(d for k, d in enumerate(reads[0]) if k != gone)]


@axis_rule(ops.PermuteOp)
def _permute(op, reads, shapes, ins):
    return [tuple(reads[0][a] for a in op.axes)]


@axis_rule(ops.UnsqueezeOp)
def _unsqueeze(op, reads, shapes, ins):
    at = normalize_axis(op.axis, len(reads[0]) + 1)
    return [reads[0][:at] + (None,) + reads[0][at:]]


@axis_rule(ops.SqueezeOp)
def _squeeze(op, reads, shapes, ins):
    gone = normalize_axis(op.axis, len(reads[0]))
    return [reads[0][:gone] + reads[0][gone + 1:]]


@axis_rule(ops.ExpandOp)
def _expand(op, reads, shapes, ins):
    return [(None,) * (len(shapes[0]) - len(reads[0])) + reads[0]]


@axis_rule(ops.ReshapeOp)
def _reshape(op, reads, shapes, ins):
    """The leading axes a reshape leaves as they are keep their dims."""
    kept = 0
    while kept < min(len(ins[0]), len(shapes[0])) and same_size(ins[0][kept], shapes[0][kept]):
        kept += 1
    return [reads[0][:kept] + (None,) * (len(shapes[0]) - kept)]


@axis_rule(ops.SpatialIndexOp)
def _spatial_index(op, reads, shapes, ins):
    kept = tuple(d for item, d in zip(op.items, reads[0]) if isinstance(item, Expr) and item.op == "slice")
    return [kept + reads[0][len(op.items):]]


@axis_rule(ops.MatMulOp)
def _matmul(op, reads, shapes, ins):
    a, b = reads
    if len(a) == 1:
        return [b[:-2] + b[-1:]]
    if len(b) == 1:
        return [a[:-1]]
    return [_aligned([a[:-2], b[:-2]], len(shapes[0]) - 2) + (a[-2], b[-1])]


@axis_rule(ops.BatchContractOp)
def _batch_contract(op, reads, shapes, ins):
    return [(reads[0][-2], reads[1][-1])]


# ----- the marks -----
Mark = Callable[[ops.Op, list[Axes], set], ops.Op]
MARKS: dict[type, Mark] = {}


def mark(op_type: type):
    def register(fn: Mark) -> Mark:
        MARKS[op_type] = fn
        return fn

    return register


@mark(ops.ReduceOp)
def _mark_reduce(op, reads, loops):
    rank = len(reads[0])
    over = any(reads[0][normalize_axis(a, rank)] in loops for a in op.axes)
    return replace(op, ordered=True) if op.fn in ("sum", "mean") and over else op


@mark(ops.DiscountedSumOp)
def _mark_discounted_sum(op, reads, loops):
    return replace(op, ordered=True) if reads[0][normalize_axis(op.axis, len(reads[0]))] in loops else op


@mark(ops.BatchContractOp)
def _mark_batch_contract(op, reads, loops):
    a, b = reads
    ordered = tuple(k for k in range(len(a) - 2) if a[k] in loops or b[k] in loops)
    return replace(op, ordered=ordered) if ordered else op


@mark(ops.MatMulOp)
def _mark_matmul(op, reads, loops):
    a, b = reads
    inner = (a[-1] in loops) or (len(b) > 1 and b[-2] in loops) or (len(b) == 1 and b[0] in loops)
    if len(a) == 1:
        rows = ()
    elif len(b) <= 2:  # b is one matrix: every leading axis of a holds rows of one product
        rows = tuple(k for k in range(len(a) - 1) if a[k] in loops)
    else:  # a stack of products, each on its own: only a's row axis
        rows = (len(a) - 2,) if a[-2] in loops else ()
    return replace(op, ordered_rows=rows, ordered_inner=inner) if rows or inner else op
