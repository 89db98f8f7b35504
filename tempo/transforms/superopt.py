"""The superoptimiser on the static islands the fuse pass made (off unless configured).

Each :class:`~tempo.ir.ops.FusedOp` is translated to a tensor graph of
:mod:`tempo.superopt` (by :mod:`tempo.superopt.island_pass`, which registers
itself here: :func:`register`), rewritten by one of its optimisers (TASO's greedy or
backtracking search, equality saturation, or the X-RLflow agent) and
translated back; operators are timed, and whole islands measured, on the
runtime's own NumPy kernels at the sizes ``sizes`` names. See
:mod:`tempo.superopt.islands` for what is translated and for the checks a
rewritten island must pass to replace the original (the same outputs, never
slower by measurement, the same symbolic output shapes, the same values at
other sizes). Running before code generation, the pass sees each island once,
whatever the number of points it runs at.

    ctx.compile(passes={"superopt": superopt.Config(agent="greedy", sizes={"B": 32, "T": 500})})
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.symbolic.expr import bound_of

AGENTS = ("greedy", "backtrack", "eqsat", "rl")


@dataclass(frozen=True)
class Config:
    """``agent``: one of :data:`AGENTS` (None: the pass leaves the program alone);
    ``budget_s``: optimisation seconds per island (the RL agent trains on each island
    for most of it); ``sizes``: the size each bound symbol (``B``, ``T``...) stands for
    while islands are timed (others: 16)."""

    agent: str | None = None
    budget_s: float = 1.0
    sizes: dict = field(default_factory=dict, hash=False)


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every island the optimiser improved replaced by its rewrite."""
    return optimise_islands(sdg, cfg)[0] if cfg.agent is not None else sdg


def optimise_islands(sdg: SDG, cfg: Config) -> tuple[SDG, dict]:
    """The rewritten SDG and, per FusedOp node id, its :class:`~tempo.superopt.islands.Outcome`."""
    if cfg.agent not in AGENTS:
        raise TempoError(f"the superopt pass runs one of {', '.join(AGENTS)}, not {cfg.agent!r}")
    bounds = sorted({bound_of(d).name for node in sdg.nodes.values() for d in node.domain}
                    | {bound_of(d).name for dims in sdg.vectorized.values() for d in dims})
    unknown = sorted(set(cfg.sizes) - set(bounds))
    if unknown:
        raise TempoError(f"superopt.Config(sizes=...) names {', '.join(unknown)}, not a bound of this program "
                         f"(its bounds: {', '.join(bounds) or 'none'})")
    if _OPTIMISER is None:
        raise TempoError("no island optimiser is registered for the superopt pass (tempo.superopt registers one)")
    return _OPTIMISER(sdg, cfg)


IslandOptimiser = Callable[[SDG, Config], tuple[SDG, dict]]
_OPTIMISER: IslandOptimiser | None = None


def register(optimiser: IslandOptimiser) -> None:
    """Make the pass rewrite islands with ``optimiser(sdg, cfg) -> (sdg, outcomes)``: ``tempo.superopt``
    registers :func:`tempo.superopt.island_pass.optimise_islands` (the application plugs into the
    pipeline; the pass does not import it)."""
    global _OPTIMISER
    _OPTIMISER = optimiser
