"""Deallocation statements in the schedule AST (TEMPO §5.2-§5.3).

A tensor that only its own point reads, the value flowing from one
statement to the next ones of the same loop body (a hidden layer's output
within one acting step, each intermediate of a vectorized learner within
one iteration), is dead as soon as its last reader at that point has run.
This pass puts a :class:`~tempo.schedule.ast.Free` of it right after the
statement holding that last reader, so at most a loop body's live values
are held at once, instead of every value until the iteration ends (when
the executor's iteration evictions would free it).

A tensor qualifies when it is not fetched, runs in one statement, and
every reader reads it at its own point (the identity index, no
condition), over the same dims, in one statement with the same point
expressions in the same sequence (through ``if``\\ s, not through a loop).
Tensors read at other points (``x[t - 1]``, slices) keep their stores'
iteration-level freeing, and a free of a point store's point is the only
free with an effect: block and window stores release whole buffers. A
tensor whose shape is static and smaller than :data:`MIN_BYTES` is left to
the iteration-level freeing too: freeing it early saves nothing and costs
a statement at every point.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from tempo.ir.sdg import SDG
from tempo.schedule import ast

MIN_BYTES = 64 * 1024


def insert_deallocations(sdg: SDG, program: ast.Stmt, keep: set[int]) -> ast.Stmt:
    """``program`` with a Free after the last reader of each tensor only its own point reads."""
    runs: dict[int, list[ast.Execute]] = defaultdict(list)
    for ex in ast.statements(program):
        runs[ex.node_id].append(ex)
    readers: dict[int, list] = defaultdict(list)
    for e in sdg.edges:
        if e.sink_in >= 0:
            readers[e.src].append(e)
    local = {n: {e.sink for e in readers[n]} for n in runs if _local(sdg, n, readers[n], runs, keep)}
    return _place(program, local, {n: runs[n][0] for n in local}, set())


def _local(sdg: SDG, n: int, edges: list, runs: dict, keep: set[int]) -> bool:
    """Whether every read of ``n`` is at its own point, from one statement at the same point."""
    node = sdg.nodes[n]
    if n in keep or not edges or len(runs[n]) != 1 or _small(node):
        return False
    (producer,) = runs[n]
    for e in edges:
        sink = sdg.nodes[e.sink]
        if e.cond is not None or len(runs.get(e.sink, ())) != 1 or len(sink.domain) != len(node.domain):
            return False
        if not all(item is d for item, d in zip(e.index.args, node.domain)) or \
                not all(a is b for a, b in zip(sink.domain, node.domain)):
            return False
        (reader,) = runs[e.sink]
        if not all(a is b for a, b in zip(reader.point, producer.point)):
            return False
    return True


def _place(stmt: ast.Stmt, local: dict[int, set[int]], producers: dict[int, ast.Execute],
           placed: set[int]) -> ast.Stmt:
    """Insert each Free after the child of the innermost sequence that holds the producer and
    its readers (``placed``: the tensors freed already, deeper in)."""
    if isinstance(stmt, ast.Loop):
        return ast.Loop(stmt.var, stmt.start, stmt.cond, stmt.step, _place(stmt.body, local, producers, placed))
    if isinstance(stmt, ast.If):
        orelse = _place(stmt.orelse, local, producers, placed) if stmt.orelse is not None else None
        return ast.If(stmt.cond, _place(stmt.then, local, producers, placed), orelse)
    if not isinstance(stmt, ast.Sequence):
        return stmt
    children = [_place(child, local, producers, placed) for child in stmt.body]
    here = [_executed_here(child) for child in children]
    frees: dict[int, list[ast.Free]] = defaultdict(list)
    for n, sinks in local.items():
        at = next((k for k, nodes in enumerate(here) if n in nodes), None)
        if at is None or n in placed:
            continue
        last = [k for k, nodes in enumerate(here) if nodes & sinks]
        if len(set().union(*(here[k] & sinks for k in last))) == len(sinks) and min(last) >= at:
            producer = producers[n]
            frees[max(last)].append(ast.Free(n, producer.point, producer.label))
            placed.add(n)
    body = []
    for k, child in enumerate(children):
        body.append(child)
        body.extend(frees.get(k, ()))
    return ast.Sequence(tuple(body))


def _executed_here(stmt: ast.Stmt) -> set[int]:
    """Nodes ``stmt`` executes at its own level: through ``if``\\ s, not inside loops."""
    if isinstance(stmt, ast.Execute):
        return {stmt.node_id}
    if isinstance(stmt, ast.If):
        return _executed_here(stmt.then) | (_executed_here(stmt.orelse) if stmt.orelse is not None else set())
    if isinstance(stmt, ast.Sequence):
        return set().union(*(_executed_here(s) for s in stmt.body)) if stmt.body else set()
    return set()


def _small(node) -> bool:
    """Whether every output has a static shape of fewer than :data:`MIN_BYTES` bytes."""
    return all(all(isinstance(s, int) for s in shape) and math.prod(shape) * np.dtype(dtype).itemsize < MIN_BYTES
               for shape, dtype in zip(node.shapes, node.dtypes))
