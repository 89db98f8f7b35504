"""Which tensors get deallocation statements (TEMPO §5.2-§5.3).

A tensor whose every point is read once, by statements of one loop body at
one point (a hidden layer's output read by the next layer at the same
step, an environment's next observation read by the placeholder ``o[t + 1]``
at the next step, each intermediate of a vectorized learner within one
iteration), is dead as soon as those readers have run. Such a tensor gets a
deallocation statement (:class:`Dealloc`), which
:mod:`tempo.schedule.isl_memory` schedules with the computation: isl places
the free of each point right after the last statement instance reading it,
so a loop body holds its live values only, instead of every value until the
iteration ends (when the executor's iteration evictions would free it).

A tensor qualifies when it is not fetched and all its reads share one index
that shifts each of the reader's dims by a constant (``x[i, t]``,
``x[i, t - 1]``: each point is read at exactly one reader point, so after
that point nothing reads it), from readers over the same dims run in one
statement each, at the same point expressions in the computation's AST. A
reader under a condition that does not hold at a point reads nothing there,
so the free is still safe. Tensors read in slices keep their stores'
iteration-level freeing (but for a learner's tiles, see
:func:`_tile_read_last`); a free of a point store's point is the only one
with an effect on a point (block and window stores release whole buffers); and a tensor whose shape is static and
smaller than :data:`MIN_BYTES` is left to the iteration-level freeing too:
freeing it early saves nothing and costs a statement at every point.

Where a node's outputs are read differently (a fused island handing one
output on at once and another one step later), each output is judged on
its own and freed by a Free of that output; and with the isl domains, the
readers of one shift may be joined by others that read only points those
never read (the result of a running sum reading its last step).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import islpy as isl
import numpy as np

from tempo.ir import ops
from tempo.ir.sdg import SDG, Node
from tempo.schedule import ast
from tempo.schedule.isl_domains import executed_reads
from tempo.symbolic.expr import Expr, bound_of, make_slice, symbol
from tempo.symbolic.simplify import simplify

MIN_BYTES = 64 * 1024


@dataclass(frozen=True)
class Dealloc:
    """A tensor freed point by point: node ``node``'s ``outputs`` (empty: all of them), at the
    points its reads ``edges`` (positions in ``sdg.edges``) read. ``holder``: a statement that
    holds a view of what those reads return, at the reader's own point (None: none). ``unread``:
    the points those reads never read are freed too, each after the last reader it has."""

    node: int
    outputs: tuple[int, ...]
    edges: tuple[int, ...]
    holder: int | None = None
    unread: bool = False  # also the executed points ``edges`` never read, each after its other readers


def deallocations(sdg: SDG, program: ast.Stmt, keep: set[int], domains=None, times=None) -> list[Dealloc]:
    """The tensors of ``program`` (the computation's AST) that qualify for deallocation statements.

    With the program's isl ``domains``, a tensor also qualifies when the readers sharing one
    shift are joined by others that read only points those never read (a running sum read one
    step back by its recurrence and at its last step by its result): its free covers the
    shifted reads, and the iteration-level freeing the rest. With the schedule's ``times`` too
    (statement -> time, an isl union map), a tensor a learner reads in tiles is freed a tile at a
    time (see :func:`_tile_read_last`).
    """
    runs: dict[int, list[ast.Execute]] = defaultdict(list)
    for ex in ast.statements(program):
        runs[ex.node_id].append(ex)
    readers: dict[int, list] = defaultdict(list)
    for k, e in enumerate(sdg.edges):
        if e.sink_in >= 0 and e.sink in runs:  # a node the schedule never runs reads nothing
            readers[e.src].append((k, e))
    out = []
    for n in runs:
        found = _freed(sdg, n, readers[n], runs, keep, domains)
        if found is not None:
            out.append(Dealloc(n, (), found))
            continue
        tiled = _tile_read_last(sdg, n, readers[n], runs, keep, domains, times) if times is not None else None
        if tiled is not None:
            out.append(tiled)
            continue
        # each output on its own (an island whose outputs are read at different shifts); the
        # outputs read by the same readers at the same index share one statement
        by_reads: dict[frozenset, tuple[list[int], list[int]]] = {}
        for j in range(len(sdg.nodes[n].shapes)):
            found = _freed(sdg, n, [(k, e) for k, e in readers[n] if e.src_out == j], runs, keep, domains, j)
            if found is not None:
                key = frozenset((sdg.edges[k].sink, sdg.edges[k].index) for k in found)
                outs, edges = by_reads.setdefault(key, ([], []))
                outs.append(j)
                edges.extend(found)
        out.extend(Dealloc(n, tuple(outs), tuple(edges)) for outs, edges in by_reads.values())
    return out


def batch_frees(stmt: ast.Stmt) -> ast.Stmt:
    """``stmt`` with every loop whose body is one Free of the loop's point along the freed
    tensor's last dim turned into one Free of those points as a slice (TEMPO §5.3: a tile's rows,
    which its block store frees at once)."""
    if isinstance(stmt, ast.Sequence):
        return ast.Sequence(tuple(batch_frees(s) for s in stmt.body))
    if isinstance(stmt, ast.If):
        return ast.If(stmt.cond, batch_frees(stmt.then), batch_frees(stmt.orelse) if stmt.orelse is not None else None)
    if not isinstance(stmt, ast.Loop):
        return stmt
    body = batch_frees(stmt.body)
    free = body.body[0] if isinstance(body, ast.Sequence) and len(body.body) == 1 else body
    stop = _stop(stmt)
    var = symbol(stmt.var)
    if isinstance(free, ast.Free) and free.point and stop is not None and free.point[-1] is var and \
            all(v is not var for item in free.point[:-1] for v in item.free_symbols()):
        return ast.Free(free.node_id, free.point[:-1] + (make_slice(stmt.start, stop),), free.label, free.outputs)
    return ast.Loop(stmt.var, stmt.start, stmt.cond, stmt.step, body)


def _stop(loop: ast.Loop) -> Expr | None:
    """The first point a step-1 loop ``for v = a; v < b`` (or ``v <= b``) does not run: ``b`` (``b + 1``)."""
    cond = loop.cond
    if loop.step != 1 or cond.op not in ("lt", "le") or cond.args[0] is not symbol(loop.var):
        return None
    return cond.args[1] if cond.op == "lt" else simplify(cond.args[1] + 1)


def _freed(sdg: SDG, n: int, readers: list, runs: dict, keep: set[int], domains,
           out: int | None = None) -> tuple[int, ...] | None:
    """What :func:`_read_once` (or, with ``domains``, :func:`_read_once_besides`) finds for the
    ``readers`` of ``n`` (of its output ``out``; None: of all of them)."""
    found = _read_once(sdg, n, readers, runs, keep, out)
    if found is None and domains is not None:
        found = _read_once_besides(sdg, n, readers, runs, keep, domains, out)
    return found


def _read_once(sdg: SDG, n: int, readers: list, runs: dict, keep: set[int],
               out: int | None = None) -> tuple[int, ...] | None:
    """The positions of the ``readers``' edges when every point of ``n`` (of its output ``out``;
    None: of all) is read at one reader point only (see the module docstring)."""
    node = sdg.nodes[n]
    if n in keep or not readers or _small(node, out):
        return None
    first = readers[0][1]
    reader_domain = sdg.nodes[first.sink].domain
    if not _shift_of(first.index, reader_domain, len(node.domain)):
        return None
    points = set()
    for _, e in readers:
        sink = sdg.nodes[e.sink]
        if e.index is not first.index or len(runs.get(e.sink, ())) != 1 or \
                not (len(sink.domain) == len(reader_domain) and all(a is b for a, b in zip(sink.domain, reader_domain))):
            return None
        points.add(runs[e.sink][0].point)
    return tuple(k for k, _ in readers) if len(points) == 1 else None


def _read_once_besides(sdg: SDG, n: int, edges: list, runs: dict, keep: set[int], domains,
                       out: int | None = None):
    """:func:`_read_once` for the readers of one shifted index, when the other readers read
    only points that those never read."""
    shifted = [(k, e) for k, e in edges if e.index.args and all(a.op != "slice" for a in e.index.args)
               and _shift_of(e.index, sdg.nodes[e.sink].domain, len(sdg.nodes[n].domain))]
    if not shifted or len(shifted) == len(edges):
        return None
    found = _read_once(sdg, n, shifted, runs, keep, out)
    if found is None:
        return None
    inside = {k for k, _ in shifted}

    def read(ks):
        out = None
        for k in ks:
            points = executed_reads(sdg, domains, k).range()
            out = points if out is None else out.union(points)
        return out

    others = read([k for k, _ in edges if k not in inside])
    return found if others.intersect(read(inside)).is_empty() else None


def _tile_read_last(sdg: SDG, n: int, edges: list, runs: dict, keep: set[int], domains, times):
    """A Free of the rows one tile reads, after the statement reading them, when ``n`` is read in
    aligned tiles (``x[i, Z*k:min(Z*k + Z, T)]``, one statement) and otherwise at points only,
    each of those reads running before the tile holding its point (checked with isl over the
    schedule's ``times``): an n-step learner fused into acting frees the observations it learned
    from while acting goes on. The points no tile reads (the last iteration's, when nothing reads
    its update) are freed after their other readers, so the memory does not depend on whether the
    last update is used. The tensor's block store holds the tiles' blocks (see
    :mod:`tempo.plan.store_choice`)."""
    node = sdg.nodes[n]
    if n in keep or _small(node):
        return None
    tiled = [(k, e) for k, e in edges if e.index.args and e.index.args[-1].op == "slice"]
    if len(tiled) != 1 or any(a.op == "slice" for _, e in edges for a in e.index.args[:-1]):
        return None
    (k_tile, tile), reader = tiled[0], sdg.nodes[tiled[0][1].sink]
    start = tile.index.args[-1].args[0]
    if len(runs.get(tile.sink, ())) != 1 or not _aligned_on_dim(start, reader.domain) or \
            any(item is not d for item, d in zip(tile.index.args[:-1], reader.domain)):
        return None

    by_point = executed_reads(sdg, domains, k_tile).reverse()  # point of n -> the tile statement reading it
    if not by_point.is_single_valued():
        return None  # read by several tiles (a tensor lifted out of the loop they run in)
    for k, e in edges:
        if k == k_tile:
            continue
        pairs = executed_reads(sdg, domains, k).apply_range(by_point)  # other reader -> tile statement reading that point
        if pairs.is_empty():
            continue
        order = isl.UnionMap.from_map(pairs).apply_domain(times).apply_range(times).deltas()
        if not all(_lex_positive(s) for s in _sets(order)):
            return None
    last = _last_holder(sdg, tile.sink, runs, domains, times)
    if last is None:
        return None
    return Dealloc(n, (), (k_tile,), None if last == tile.sink else last, unread=True)


# Ops whose output may be a view of their input (on NumPy): a reader of a tile that only
# reshapes or permutes it hands on the tile's memory, which lives while that value does.
VIEW_OPS = (ops.ReshapeOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp, ops.UnsqueezeOp)


def _may_view(node: Node) -> bool:
    steps = node.op.steps if isinstance(node.op, ops.FusedOp) else ()
    return isinstance(node.op, VIEW_OPS) or bool(steps) and all(isinstance(st.op, VIEW_OPS) for st in steps)


def _last_holder(sdg: SDG, n: int, runs: dict, domains, times) -> int | None:
    """The statement after which the tile ``n`` reads is dead: ``n`` itself, or, when ``n`` may
    hand on a view of it, the reader of that view that runs last at each of ``n``'s points
    (every reader reading it at ``n``'s own point, none a view in turn; checked over ``times``);
    None when there is no such reader."""
    node = sdg.nodes[n]
    if not _may_view(node):
        return n
    holders = []
    for k, e in enumerate(sdg.edges):
        if e.src != n or e.sink_in < 0 or e.sink not in runs:
            continue
        if len(runs[e.sink]) != 1 or _may_view(sdg.nodes[e.sink]) or len(e.index.args) != len(node.domain) \
                or any(item is not d for item, d in zip(e.index.args, node.domain)):
            return None
        holders.append((k, e.sink))

    def reads(k: int):
        return domains.reads[k].intersect_domain(domains.executed[sdg.edges[k].sink])

    for k, h in holders:
        after_all = True
        for k2, h2 in holders:
            if h2 == h:
                continue
            pairs = reads(k2).apply_range(reads(k).reverse())  # the other reader -> h, at one point of n
            order = isl.UnionMap.from_map(pairs).apply_domain(times).apply_range(times).deltas()
            after_all = after_all and all(_lex_positive(s) for s in _sets(order))
        if after_all:
            return h
    return None if holders else n


def _aligned_on_dim(start: Expr, domain: tuple[Expr, ...]) -> bool:
    """Whether ``start`` is ``Z * k`` for a dim ``k`` of ``domain`` and a constant ``Z``."""
    if start.op != "mul" or len(start.args) != 2:
        return False
    a, b = start.args
    scale, dim = (a, b) if a.is_const else (b, a)
    return scale.is_const and any(dim is d for d in domain)


def _sets(union) -> list:
    out = []
    union.foreach_set(out.append)
    return out


def _lex_positive(deltas) -> bool:
    return deltas.is_subset(isl.Map.lex_lt(deltas.get_space()).deltas())


def _shift_of(index: Expr, reader_domain: tuple[Expr, ...], rank: int) -> bool:
    """Whether item ``k`` of ``index`` is the reader's dim ``k`` plus a constant, for every ``k``."""
    if len(index.args) != rank or len(reader_domain) != rank:
        return False
    for item, d in zip(index.args, reader_domain):
        if item.op == "slice":
            return False
        offset = simplify(item - d)
        if not offset.is_const:
            return False
    return True


def _small(node: Node, out: int | None = None) -> bool:
    """Whether every output (or output ``out``) has a static shape of fewer than :data:`MIN_BYTES` bytes."""
    outputs = zip(node.shapes, node.dtypes) if out is None else [(node.shapes[out], node.dtypes[out])]
    return all(all(isinstance(s, int) for s in shape) and math.prod(shape) * np.dtype(dtype).itemsize < MIN_BYTES
               for shape, dtype in outputs)


# The static bytes of a row of acting's output that a learner's early tiles must free while
# acting goes on for the tiles to be worth their launches (observations, not per-step scalars).
LARGE_ROW_BYTES = 1024


def tiles_freed_while_acting(sdg: SDG, program: ast.Stmt) -> bool:
    """Whether a loop of ``program`` (the AST with its frees) that runs acting's steps (a tiled
    dim's, outside the tiles) also frees, tile by tile, a tensor of acting that the learner's tiles
    read, with rows of at least :data:`LARGE_ROW_BYTES`: the tiles run while acting goes on and
    free what they learned from (n-step returns), rather than after the episode's end (a
    Monte-Carlo return, GAE), where they only add launches."""
    steps_of = {tile_bound: steps for tile_bound, (steps, _) in sdg.tiles.items()}

    def over(n: int, bound: str) -> bool:
        return any(bound_of(d).name == bound for d in sdg.nodes[n].domain)

    def large(n: int, out: int) -> bool:
        node = sdg.nodes[n]
        static = [x for x in node.shapes[out] if isinstance(x, int)]
        return math.prod(static) * np.dtype(node.dtypes[out]).itemsize >= LARGE_ROW_BYTES

    streamed = {e.src for e in sdg.edges for tile_bound, steps in steps_of.items()
                if over(e.sink, tile_bound) and over(e.src, steps) and not over(e.src, tile_bound)
                and large(e.src, e.src_out)}
    acting = {n for n in sdg.nodes if any(over(n, steps) for steps in steps_of.values())
              and not any(over(n, tile_bound) for tile_bound in steps_of)}
    for loop in ast.all_loops(program):
        own = ast.own_leaves(loop.body)
        if any(isinstance(s, ast.Free) and s.node_id in streamed for s in own) and \
                any(isinstance(s, ast.Execute) and s.node_id in acting for s in own):
            return True
    return False

