"""Which tensor store holds each tensor, chosen from how the program reads it (TEMPO §6).

The analysis looks at every read of a tensor along its innermost temporal
dim (the last dim of its domain) and at where the schedule AST runs the
tensor's writer and its readers:

- a **window store** of ``W`` points when every read is at the reader's own
  outer point, at least one slices the innermost dim, the writer runs in a
  loop over that dim at ``counter + k``, and each reader either runs in the
  same loop, reading a point or a window ``max(0, t + a):t + b`` behind the
  writer, or after it, reading a window that ends by the bound
  (``x[T - 1]``); ``W`` covers the lowest point any read needs down to the
  latest point written by then, so memory does not grow with the bound
  (fetched tensors, kept whole, are never window stored);
- otherwise a **block store** when some read slices the innermost dim: blocks
  of ``K`` rows when every such slice is an aligned block
  ``(e // K) * K:(e // K) * K + K`` or a tile ``K * k:K * k + K``, else one block spanning the dim
  (causal ``0:t+1``, anti-causal ``t:T``, whole ``0:T`` reads), its rows laid out in
  memory where its readers' permutations of a slice read move them
  (:func:`_rows_axis`), so the permuted read is contiguous;
- a **point store** otherwise, and for tensors whose spatial shape varies per
  point, tensors with no temporal dims, and tensors the executor frees point
  by point along their innermost dim that a dim-long block would keep alive.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping

from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.plan.evictions import iteration_evictions
from tempo.schedule import ast
from tempo.symbolic.affine import const_diff, last_true, offset, uses
from tempo.symbolic.expr import Expr, bound_of
from tempo.symbolic.simplify import simplify


@dataclass(frozen=True)
class StoreChoice:
    """``kind``: ``"point"``, ``"block"`` or ``"window"``; ``size``: rows per block
    (None: the innermost dim's bound) or points a window store holds; ``axis``: where a
    block store's rows lie in memory among a row's axes (0: row after row)."""

    kind: str
    size: int | None = None
    axis: int = 0


POINT = StoreChoice("point")


def store_choices(sdg: SDG, program: ast.Stmt, keep) -> dict[tuple[int, int], StoreChoice]:
    """Each tensor's store choice (missing: a point store) for ``program``, the executor freeing
    what :func:`tempo.plan.evictions.iteration_evictions` finds as the main loop goes."""
    _, evictions = iteration_evictions(sdg, program, keep)
    return choose_stores(sdg, program, keep, {e.node: e.axis for e in evictions})


def choose_stores(sdg: SDG, program: ast.Stmt, keep=frozenset(),
                  evicted: Mapping[int, int] | None = None) -> dict[tuple[int, int], StoreChoice]:
    """The store of every output of every node the schedule ``program`` executes.

    ``keep``: nodes whose values are fetched (kept whole); ``evicted``: node ->
    the axis along which the executor frees its points as the main loop runs.
    """
    places = _places(program)
    reads: dict[tuple[int, int], list[Edge]] = defaultdict(list)
    for e in sdg.edges:
        if e.sink in places:
            reads[(e.src, e.src_out)].append(e)
    evicted = evicted or {}
    return {(n, j): _choose(sdg, sdg.nodes[n], j, reads[(n, j)], places, n in keep, evicted.get(n))
            for n in places for j in range(len(sdg.nodes[n].shapes))}


def _choose(sdg: SDG, node: Node, out: int, edges: list[Edge], places, kept: bool,
            evicted_axis) -> StoreChoice:
    if not node.domain or not _static(node.shapes[out]):
        return POINT
    lasts = [simplify(e.index.args[-1]) for e in edges]
    slices = [x for x in lasts if x.op == "slice"]
    if not slices:
        return POINT
    if not kept:
        capacity = _window_capacity(sdg, node, edges, lasts, places)
        if capacity is not None:
            return StoreChoice("window", capacity)
    sizes = {_aligned_block(s.args[0], s.args[1]) for s in slices}
    length = sizes.pop() if len(sizes) == 1 else None
    frees_rows = evicted_axis == len(node.domain) - 1 and not all(_low(x).is_const for x in lasts)
    if length is None and frees_rows:
        return POINT
    return StoreChoice("block", length, _rows_axis(sdg, edges, len(node.shapes[out])))


def _rows_axis(sdg: SDG, edges: list[Edge], row_ndim: int) -> int:
    """Where a block store's rows go in memory among a row's axes: where every read that
    slices the innermost dim alone is moved by the permutations its reader applies to it
    first (attention's keys ``k[0:t+1]`` permuted to (batch, heads, head_dim, t)), but
    never after a row's last axis, so a row is still written as runs; 0 when the reads
    do not agree or are used otherwise."""
    if row_ndim < 2:
        return 0
    axes = set()
    for e in edges:
        index = [simplify(x) for x in e.index.args]
        if index[-1].op != "slice":
            continue
        if any(x.op == "slice" for x in index[:-1]):
            return 0
        sink = sdg.nodes[e.sink].op
        uses = [s.op for s in sink.steps if (-1, e.sink_in) in s.inputs] if isinstance(sink, ops.FusedOp) else [sink]
        for op in uses:
            if not isinstance(op, ops.PermuteOp):
                return 0
            axes.add(min(list(op.axes).index(0), row_ndim - 1))
    return axes.pop() if len(axes) == 1 else 0


def _static(shape: tuple) -> bool:
    """Whether every size of ``shape`` is fixed by the bounds alone."""
    return all(isinstance(s, int) or all(x.kind == "bound" for x in s.free_symbols()) for s in shape)


def _low(index: Expr) -> Expr:
    return index.args[0] if index.op == "slice" else index


def _aligned_block(start: Expr, stop: Expr) -> int | None:
    """``K`` when ``start:stop`` is ``(e // K) * K:(e // K) * K + K`` or ``K * k:K * k + K`` for a
    dim ``k`` (a tile; either stop capped by a ``min``): a slice that never leaves one aligned
    block of ``K`` rows."""
    if start.op != "mul" or len(start.args) != 2:
        return None
    scale = [a for a in start.args if a.is_const]
    inner = [a for a in start.args if not a.is_const]
    if len(scale) != 1 or len(inner) != 1 or inner[0].op not in ("floordiv", "sym"):
        return None
    k = int(scale[0].value)
    divisor = inner[0].args[1] if inner[0].op == "floordiv" else scale[0]  # Z * k: the tile k of Z rows
    if k < 1 or not divisor.is_const or int(divisor.value) != k:
        return None
    ends = stop.args if stop.op == "min" else (stop,)
    return k if any(const_diff(end, start) == k for end in ends) else None


def _window_span(index: Expr, dim: Expr) -> tuple[int, int] | None:
    """``(lo, hi)``: the read covers at most ``dim + lo`` to ``dim + hi``, when ``index``
    is a point ``dim + c`` or a slice ``max(c0, dim + a):dim + b`` (its stop maybe
    capped by a ``min``); ``dim`` may also be a bound symbol."""
    if index.op != "slice":
        c = const_diff(index, dim)
        return None if c is None else (c, c)
    start, stop = index.args
    starts = [a for a in start.args if not a.is_const] if start.op == "max" else [start]
    stops = [a for a in stop.args if not a.free_symbols() <= _bounds(a)] if stop.op == "min" else [stop]
    if len(starts) != 1 or len(stops) != 1:
        return None
    lo, end = const_diff(starts[0], dim), const_diff(stops[0], dim)
    if lo is None or end is None or end - 1 < lo:
        return None
    return lo, end - 1


def _bounds(e: Expr) -> frozenset:
    return frozenset(s for s in e.free_symbols() if s.kind == "bound")


def _window_capacity(sdg: SDG, node: Node, edges: list[Edge], lasts: list[Expr], places) -> int | None:
    """The points a window store of ``node`` must hold, or None when one does not fit:
    its one writer runs in a loop over its innermost dim, and every reader reads at its
    own outer point either in that loop (a window behind the writer) or after it
    (a window ending at the dim's bound, ``x[T - 1]``)."""
    dim, outer = node.domain[-1], node.domain[:-1]
    writers = places.get(node.id, [])
    if len(writers) != 1 or not writers[0][1]:
        return None
    write, loops, write_order = writers[0]
    loop = next((x for x in reversed(loops) if uses(write.point[-1], x.var)), None)  # may enclose loops over outer dims
    k_write = None if loop is None else offset(write.point[-1], loop.var)
    if k_write is None or loop.step != 1 or any(uses(p, loop.var) for p in write.point[:-1]):
        return None
    capacity = 1
    for e, last in zip(edges, lasts):
        reader = sdg.nodes[e.sink]
        axes = [_axis(reader.domain, d) for d in outer]
        if any(a is not d for a, d in zip(e.index.args[:-1], outer)) or None in axes:
            return None
        for run, run_loops, order in places[e.sink]:
            if any(run.point[a] is not p for a, p in zip(axes, write.point[:-1])):
                return None
            if any(x is loop for x in run_loops):
                latest = k_write - (order < write_order)  # the writer's offset when the reader runs
                need = _need_in_loop(e, last, dim, _axis(reader.domain, dim), run, loop.var, latest)
            elif order > write_order and all(any(x is y for x in run_loops) for y in loops[:-1]):
                need = _need_after_loop(last, bound_of(dim))
            else:
                need = None
            if need is None:
                return None
            capacity = max(capacity, need)
    return capacity


def _need_in_loop(e: Edge, last: Expr, dim: Expr, axis, run: ast.Execute, var: str, latest: int) -> int | None:
    """The points from the lowest one this in-loop read needs to the latest one written."""
    span = _window_span(last, dim)
    if span is None and last.is_const and e.cond is not None:  # x[0] if t == 0: a point of the window
        until, c = last_true(e.cond, dim), int(last.value)
        span = None if until is None else (c - until, c - until if e.cond.op == "eq" else c)
    k_read = None if span is None or axis is None else offset(run.point[axis], var)
    if k_read is None or k_read + span[1] > latest:
        return None
    return latest - (k_read + span[0]) + 1


def _need_after_loop(last: Expr, bound: Expr) -> int | None:
    """The points a read after the writer's loop needs: a window ending by ``bound - 1``."""
    span = _window_span(last, bound)
    return None if span is None or span[1] > -1 else -span[0]


def _axis(domain: tuple, dim: Expr) -> int | None:
    return next((k for k, d in enumerate(domain) if d is dim), None)


def _places(program: ast.Stmt) -> dict[int, list[tuple[ast.Execute, tuple[ast.Loop, ...], int]]]:
    """node -> its Execute statements, each with its enclosing loops (outermost
    first) and its position in program order."""
    out: dict[int, list] = defaultdict(list)
    order = itertools.count()

    def walk(stmt, loops):
        if isinstance(stmt, ast.Sequence):
            for s in stmt.body:
                walk(s, loops)
        elif isinstance(stmt, ast.Loop):
            walk(stmt.body, loops + (stmt,))
        elif isinstance(stmt, ast.If):
            walk(stmt.then, loops)
            if stmt.orelse is not None:
                walk(stmt.orelse, loops)
        elif isinstance(stmt, ast.Execute):
            out[stmt.node_id].append((stmt, loops, next(order)))

    walk(program, ())
    return dict(out)
