"""The swap plan: which tensors live in the host tier between their uses (TEMPO §5.2, Fig. 15b).

:func:`choose` picks the tensors; :mod:`tempo.schedule.isl_swap` places their
evict and load statements on the computed schedule (an evict right after
production, per reader a load right before and an evict right after each
instance that reads), and the AST passes of :mod:`tempo.schedule.swap_passes`
then remove the moves that change nothing (a point evicted and loaded back
with no use between stays on the device) and batch loops of moves into
moves of slices.

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
from tempo.schedule import ast
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import bound_of

MIN_BYTES = 1 << 20


def choose(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None,
           budget: int, plan: str = "default") -> set[tuple[int, int]]:
    """``(node, output)`` of every tensor ``plan`` (see :func:`known_plan`) swaps in ``program`` for
    a device ``budget`` in bytes and the run's ``bounds`` (None: not known)."""
    bounds = with_tiles(sdg, bounds)
    swapped = candidates(sdg, program, keep, bounds)
    if plan != "default" and swapped:
        if bounds is None:
            raise TempoError(f"the {plan!r} swap plan needs the run's bounds when it is compiled: "
                             "use ctx.run(bounds, memory=...)")
        from tempo.memplan.extract import tempo_schedule

        agent = plan.partition(":")[2] or "heuristic"
        swapped -= tempo_schedule.resident(sdg, program, keep, bounds, budget, swapped, agent)
    return swapped


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


def swapped(sdg: SDG, program: ast.Stmt) -> set[tuple[int, int]]:
    """``(node, output)`` of every tensor an evict or load statement of ``program`` moves."""
    return {(s.node_id, j) for s in ast.leaves(program) if isinstance(s, ast.Evict)
            for j in s.moved(len(sdg.nodes[s.node_id].shapes))}
