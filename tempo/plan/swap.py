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
produced. Other plans keep some of them on the device: an application
registers one by name (:func:`register`); ``tempo.memplan`` registers
``"memplan"``, which keeps those it fits into the budget
(:mod:`tempo.memplan.extract.tempo_schedule`).

The plan needs sizes, so it is made for the run's bounds when compilation
knows them (``ctx.run``); without them, a size that depends on a bound
counts as large.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.plan.store_choice import store_choices
from tempo.schedule import ast
from tempo.symbolic.evaluate import shape_at
from tempo.symbolic.expr import bound_of

MIN_BYTES = 1 << 20

# ``keeps(sdg, program, keep, bounds, budget, candidates, agent) -> the candidates kept on the device``
Keeps = Callable[..., set]
PLANS: dict[str, tuple[Keeps, tuple[str, ...]]] = {}  # plan name -> (keeps, its agents, the default first)


def register(name: str, keeps: Keeps, agents: tuple[str, ...]) -> None:
    """Make ``memory={"plan": name}`` (or ``name:AGENT``, an agent of ``agents``; the first by
    default) keep on the device the candidates ``keeps`` chooses."""
    PLANS[name] = (keeps, tuple(agents))


@dataclass(frozen=True)
class Resident:
    """A registered plan with its agent: called as ``keeps`` is, without the agent."""

    plan: str
    keeps: Keeps
    agent: str

    def __call__(self, sdg, program, keep, bounds, budget, found) -> set:
        return self.keeps(sdg, program, keep, bounds, budget, found, self.agent)


def chooser(plan: str) -> Resident | None:
    """The chooser ``plan`` names (see :func:`known_plan`); None for ``"default"``."""
    if plan == "default":
        return None
    name, _, agent = plan.partition(":")
    keeps, agents = PLANS[name]
    return Resident(plan, keeps, agent or agents[0])


def known_plan(plan) -> bool:
    """Whether ``plan`` names a swap plan: ``"default"``, a registered plan's name, or its name and
    one of its agents (``"memplan:es"``)."""
    if not isinstance(plan, str):
        return False
    name, _, agent = plan.partition(":")
    return plan == "default" or (name in PLANS and (not agent or agent in PLANS[name][1]))


def choose(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None,
           budget: int, resident: Resident | None = None) -> set[tuple[int, int]]:
    """``(node, output)`` of every tensor the plan swaps in ``program`` for a device ``budget`` in
    bytes and the run's ``bounds`` (None: not known): the default plan's :func:`candidates`, less
    those ``resident`` (a :func:`chooser`) keeps on the device."""
    bounds = with_tiles(sdg, bounds)
    swapped = candidates(sdg, program, keep, bounds)
    if resident is not None and swapped:
        if bounds is None:
            raise TempoError(f"the {resident.plan!r} swap plan needs the run's bounds when it is compiled: "
                             "use ctx.run(bounds, memory=...)")
        swapped -= resident(sdg, program, keep, bounds, budget, swapped)
    return swapped


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
                whole: bool = False, choices: dict | None = None) -> dict:
    """``(node, output) -> bytes of one block`` of every block-stored tensor (``whole``: of all its
    blocks along the innermost dim; ``math.inf`` where the size depends on a bound not given);
    ``choices``: the program's store choices (None: chosen here)."""
    out = {}
    for key, choice in (store_choices(sdg, program, keep) if choices is None else choices).items():
        if choice.kind != "block":
            continue
        node = sdg.nodes[key[0]]
        try:
            bound = bounds[bound_of(node.domain[-1]).name]
            rows = bound if whole else min(choice.size or bound, bound)
            shape = shape_at(node.shapes[key[1]], bounds)
        except (KeyError, TypeError):
            out[key] = math.inf
            continue
        out[key] = rows * math.prod(shape) * np.dtype(node.dtypes[key[1]]).itemsize
    return out


def candidates(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int] | None,
               choices: dict | None = None) -> set[tuple[int, int]]:
    """The tensors the default plan swaps: block-stored, read in slices, at least :data:`MIN_BYTES`
    along the innermost dim (in one block, or in tiles' blocks); ``choices`` as for :func:`block_bytes`."""
    sliced = {(e.src, e.src_out) for e in sdg.edges if any(item.op == "slice" for item in e.index.args)}
    return {key for key, nbytes in block_bytes(sdg, program, keep, bounds, True, choices).items()
            if key in sliced and nbytes >= MIN_BYTES}


def swapped(sdg: SDG, program: ast.Stmt) -> frozenset[tuple[int, int]]:
    """``(node, output)`` of every tensor an evict or load statement of ``program`` moves."""
    return frozenset((s.node_id, j) for s in ast.leaves(program) if isinstance(s, ast.Evict)
                     for j in s.moved(len(sdg.nodes[s.node_id].shapes)))
