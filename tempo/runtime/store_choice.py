"""Which tensor store holds each tensor, chosen from how the program reads it (TEMPO §6).

The analysis looks at every read of a tensor along its innermost temporal
dim (the last dim of its domain) and at where the schedule AST runs the
tensor's writer and its readers:

- a **window store** of ``W`` points when every read is a point or a slice
  ``max(0, t + a):t + b`` at the reader's own outer point, at least one is a
  slice, and the writer and every reader run in the same loop over that dim,
  at ``counter + k``; ``W`` covers the lowest point any read needs down to the
  latest point written by then, so memory does not grow with the bound
  (fetched tensors, kept whole, are never window stored);
- otherwise a **block store** when some read slices the innermost dim: blocks
  of ``K`` rows when every such slice is an aligned block
  ``(e // K) * K:(e // K) * K + K``, else one block spanning the dim (causal
  ``0:t+1``, anti-causal ``t:T``, whole ``0:T`` reads);
- a **point store** otherwise, and for tensors whose spatial shape varies per
  point, tensors with no temporal dims, and tensors the executor frees point
  by point along their innermost dim that a dim-long block would keep alive.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping

from tempo.ir.sdg import SDG, Edge, Node
from tempo.schedule import ast
from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify


@dataclass(frozen=True)
class StoreChoice:
    """``kind``: ``"point"``, ``"block"`` or ``"window"``; ``size``: rows per block
    (None: the innermost dim's bound) or points a window store holds."""

    kind: str
    size: int | None = None


POINT = StoreChoice("point")


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
    return StoreChoice("block", length)


def _static(shape: tuple) -> bool:
    """Whether every size of ``shape`` is fixed by the bounds alone."""
    return all(isinstance(s, int) or all(x.kind == "bound" for x in s.free_symbols()) for s in shape)


def _low(index: Expr) -> Expr:
    return index.args[0] if index.op == "slice" else index


def _const_diff(a: Expr, b: Expr) -> int | None:
    d = simplify(a - b)
    return int(d.value) if d.is_const else None


def _aligned_block(start: Expr, stop: Expr) -> int | None:
    """``K`` when ``start:stop`` is ``(e // K) * K:(e // K) * K + K`` (or that stop
    capped by a ``min``): a slice that never leaves one aligned block of ``K`` rows."""
    if start.op != "mul" or len(start.args) != 2:
        return None
    scale = [a for a in start.args if a.is_const]
    inner = [a for a in start.args if not a.is_const]
    if len(scale) != 1 or len(inner) != 1 or inner[0].op != "floordiv":
        return None
    k = int(scale[0].value)
    divisor = inner[0].args[1]
    if k < 1 or not divisor.is_const or int(divisor.value) != k:
        return None
    ends = stop.args if stop.op == "min" else (stop,)
    return k if any(_const_diff(end, start) == k for end in ends) else None


def _window_span(index: Expr, dim: Expr) -> tuple[int, int] | None:
    """``(lo, hi)``: the read covers at most ``dim + lo`` to ``dim + hi``, when ``index``
    is a point ``dim + c`` or a slice ``max(c0, dim + a):dim + b`` (its stop maybe
    capped by a ``min``)."""
    if index.op != "slice":
        c = _const_diff(index, dim)
        return None if c is None else (c, c)
    start, stop = index.args
    starts = [a for a in start.args if not a.is_const] if start.op == "max" else [start]
    stops = [a for a in stop.args if not a.free_symbols() <= _bounds(a)] if stop.op == "min" else [stop]
    if len(starts) != 1 or len(stops) != 1:
        return None
    lo, end = _const_diff(starts[0], dim), _const_diff(stops[0], dim)
    if lo is None or end is None or end - 1 < lo:
        return None
    return lo, end - 1


def _bounds(e: Expr) -> frozenset:
    return frozenset(s for s in e.free_symbols() if s.kind == "bound")


def _window_capacity(sdg: SDG, node: Node, edges: list[Edge], lasts: list[Expr], places) -> int | None:
    """The points a window store of ``node`` must hold, or None when one does not fit
    (see the module docstring)."""
    dim, outer = node.domain[-1], node.domain[:-1]
    writers = places.get(node.id, [])
    if len(writers) != 1 or not writers[0][1]:
        return None
    write, loops, write_order = writers[0]
    loop = loops[-1]
    k_write = _shift(write.point[-1], loop.var)
    if k_write is None or loop.step != 1 or any(_uses(p, loop.var) for p in write.point[:-1]):
        return None
    capacity = 1
    for e, last in zip(edges, lasts):
        span = _window_span(last, dim)
        if span is None or any(a is not d for a, d in zip(e.index.args[:-1], outer)):
            return None
        reader = sdg.nodes[e.sink]
        axes = [_axis(reader.domain, d) for d in node.domain]
        if any(a is None for a in axes):
            return None
        for run, run_loops, order in places[e.sink]:
            k_read = _shift(run.point[axes[-1]], loop.var)
            if (k_read is None or not any(x is loop for x in run_loops)
                    or any(run.point[a] is not p for a, p in zip(axes[:-1], write.point[:-1]))):
                return None
            latest = k_write - (0 if write_order < order else 1)
            if k_read + span[1] > latest:
                return None
            capacity = max(capacity, latest - (k_read + span[0]) + 1)
    return capacity


def _axis(domain: tuple, dim: Expr) -> int | None:
    return next((k for k, d in enumerate(domain) if d is dim), None)


def _uses(e: Expr, var: str) -> bool:
    return any(s.name == var for s in e.free_symbols())


def _shift(e: Expr, var: str) -> int | None:
    """``k`` when ``e`` is ``var + k``."""
    counter = next((s for s in e.free_symbols() if s.name == var), None)
    return None if counter is None else _const_diff(e, counter)


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
        else:
            out[stmt.node_id].append((stmt, loops, next(order)))

    walk(program, ())
    return dict(out)
