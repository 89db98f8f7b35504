"""The swap plan: evict and load statements in the schedule AST (TEMPO §5.2, Fig. 15b).

A tensor the plan swaps lives in the host tier between its uses. For every
statement that produces it, an evict of the point produced follows
(Evict_A: right after production); for every statement that reads it, a
load of what that statement reads precedes it and an evict of the same
points follows it (Load, and Evict_B after the last use). A read under a
condition (a merge's branch) is loaded and evicted under that condition.
The AST passes of :mod:`tempo.schedule.swap_passes` then remove the moves
that change nothing (a point evicted and loaded back with no use between
stays on the device) and batch loops of moves into moves of slices.

Which tensors swap (:func:`candidates`, the default plan): never the
frequently read ones (parameters, which are read at points; K/V and other
windows, which live in window stores), but tensors held in block stores of
at least :data:`MIN_BYTES` along their innermost dim that some statement reads in slices:
read far from where they are produced, as an RL learner reads what acting
produced. The ``"memplan"`` plan keeps on the device those of them that
``tempo.memplan`` fits into the budget (:mod:`tempo.memplan.extract.tempo_schedule`).

The plan needs sizes, so it is made for the run's bounds when compilation
knows them (``ctx.run``); without them, a size that depends on a bound
counts as large.
"""
from __future__ import annotations

import math

import numpy as np

from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.schedule import ast, swap_passes
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import bound_of
from tempo.symbolic.simplify import simplify

MIN_BYTES = 1 << 20


def apply(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None,
          budget: int, plan: str = "default") -> ast.Stmt:
    """``program`` with the evict and load statements of ``plan`` (see :func:`known_plan`) for a
    device ``budget`` in bytes and the run's ``bounds`` (None: not known), after the swap AST passes."""
    bounds = with_tiles(sdg, bounds)
    swapped = candidates(sdg, program, keep, bounds)
    if plan != "default" and swapped:
        if bounds is None:
            raise TempoError(f"the {plan!r} swap plan needs the run's bounds when it is compiled: "
                             "use ctx.run(bounds, memory=...)")
        from tempo.memplan.extract import tempo_schedule

        agent = plan.partition(":")[2] or "heuristic"
        swapped -= tempo_schedule.resident(sdg, program, keep, bounds, budget, swapped, agent)
    return swap_passes.apply(sdg, insert_swaps(sdg, program, swapped))


def known_plan(plan) -> bool:
    """Whether ``plan`` names a swap plan: ``"default"``, ``"memplan"`` or ``"memplan:AGENT"``
    (an agent of :data:`tempo.memplan.agents.AGENTS`; ``"memplan"`` is its heuristic)."""
    from tempo.memplan.agents import AGENTS

    if not isinstance(plan, str):
        return False
    name, _, agent = plan.partition(":")
    return plan == "default" or (name == "memplan" and (not agent or agent in AGENTS))


def with_tiles(sdg: SDG, bounds: dict[str, int] | None) -> dict[str, int] | None:
    """``bounds`` with the bound of each tile dim the tiling pass made (``ceil(dim / tile)``)."""
    if bounds is None:
        return None
    out = dict(bounds)
    for tiles, (whole, size) in sdg.tiles.items():
        if whole in out:
            out[tiles] = -(-out[whole] // size)
    return out


def block_bytes(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None,
                whole: bool = False) -> dict:
    """``(node, output) -> bytes of one block`` of every block-stored tensor (``whole``: of all its
    blocks along the innermost dim; ``math.inf`` where the size depends on a bound not given)."""
    from tempo.runtime.executor import store_choices

    out = {}
    for key, choice in store_choices(sdg, program, keep).items():
        if choice.kind != "block":
            continue
        node = sdg.nodes[key[0]]
        try:
            bound = bounds[bound_of(node.domain[-1]).name]
            rows = bound if whole else min(choice.size or bound, bound)
            shape = [s if isinstance(s, int) else int(compile_expr(s)(bounds)) for s in node.shapes[key[1]]]
        except (KeyError, TypeError):
            out[key] = math.inf
            continue
        out[key] = rows * math.prod(shape) * np.dtype(node.dtypes[key[1]]).itemsize
    return out


def candidates(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None) -> set[tuple[int, int]]:
    """The tensors the default plan swaps: block-stored, read in slices, at least :data:`MIN_BYTES`
    along the innermost dim (in one block, or in tiles' blocks)."""
    sliced = {(e.src, e.src_out) for e in sdg.edges if any(item.op == "slice" for item in e.index.args)}
    return {key for key, nbytes in block_bytes(sdg, program, keep, bounds, whole=True).items()
            if key in sliced and nbytes >= MIN_BYTES}


def insert_swaps(sdg: SDG, program: ast.Stmt, swapped: set[tuple[int, int]]) -> ast.Stmt:
    """``program`` with a load before and an evict after each read of a ``swapped`` tensor, and
    an evict after each statement that produces one (see the module docstring)."""
    if not swapped:
        return program

    def walk(stmt: ast.Stmt) -> list[ast.Stmt]:
        if isinstance(stmt, ast.Sequence):
            return [ast.Sequence(tuple(s for child in stmt.body for s in walk(child)))]
        if isinstance(stmt, ast.Loop):
            return [ast.Loop(stmt.var, stmt.start, stmt.cond, stmt.step, _one(walk(stmt.body)))]
        if isinstance(stmt, ast.If):
            orelse = _one(walk(stmt.orelse)) if stmt.orelse is not None else None
            return [ast.If(stmt.cond, _one(walk(stmt.then)), orelse)]
        if isinstance(stmt, ast.Execute):
            return _around(sdg, stmt, swapped)
        return [stmt]

    return _one(walk(program))


def _around(sdg: SDG, stmt: ast.Execute, swapped) -> list[ast.Stmt]:
    """The loads before ``stmt``, ``stmt``, and the evicts after it."""
    node = sdg.nodes[stmt.node_id]
    at = dict(zip(node.domain, stmt.point))
    reads = {}
    for e in sdg.in_edges(stmt.node_id):
        if e.sink_in >= 0 and (e.src, e.src_out) in swapped:
            index = tuple(simplify(item.substitute(at)) for item in e.index.args)
            cond = simplify(e.cond.substitute(at)) if e.cond is not None else None
            reads.setdefault((e.src, e.src_out, index, cond), None)
    loads, evicts = [], []
    for src, out, index, cond in reads:
        label, outputs = _label(sdg, src), (out,) if len(sdg.nodes[src].shapes) > 1 else ()
        loads.append(_guard(ast.Load(src, index, label, outputs), cond))
        evicts.append(_guard(ast.Evict(src, index, label, outputs), cond))
    point = tuple(simplify(p) for p in stmt.point)
    produced = tuple(j for j in range(len(node.shapes)) if (stmt.node_id, j) in swapped)
    if produced:
        outputs = () if len(produced) == len(node.shapes) else produced
        evicts.append(ast.Evict(stmt.node_id, point, stmt.label, outputs))
    return loads + [stmt] + evicts


def _guard(stmt: ast.Stmt, cond) -> ast.Stmt:
    return stmt if cond is None else ast.If(cond, stmt)


def _label(sdg: SDG, n: int) -> str:
    node = sdg.nodes[n]
    return node.label or f"{node.op.name}%{n}"


def _one(stmts: list[ast.Stmt]) -> ast.Stmt:
    return stmts[0] if len(stmts) == 1 else ast.Sequence(tuple(stmts))


def swapped(sdg: SDG, program: ast.Stmt) -> set[tuple[int, int]]:
    """``(node, output)`` of every tensor an evict or load statement of ``program`` moves."""
    return {(s.node_id, j) for s in ast.leaves(program) if isinstance(s, ast.Evict)
            for j in s.moved(len(sdg.nodes[s.node_id].shapes))}
