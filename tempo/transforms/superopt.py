"""The superoptimiser on the static islands the fuse pass made (off unless configured).

Each :class:`~tempo.ir.ops.FusedOp` is translated to a tensor graph of
:mod:`tempo.superopt`, rewritten by one of its optimisers (TASO's greedy or
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

import logging
from dataclasses import dataclass, field, replace

from tempo.errors import TempoError
from tempo.ir.ops import FusedOp
from tempo.ir.sdg import SDG
from tempo.symbolic.expr import bound_of

AGENTS = ("greedy", "backtrack", "eqsat", "rl")
log = logging.getLogger(__name__)


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
    import torch

    from tempo.superopt.agent import PPOConfig
    from tempo.superopt.costmodel import CostModel
    from tempo.superopt.islands import Island, optimise
    from tempo.superopt.rules import load_rules

    options: dict = {"model": CostModel(backend="numpy")}
    if cfg.agent == "rl":   # no curriculum: windows of an island are not islands the runtime can run
        options.update(progress=False, config=PPOConfig(window_share=0.0))
    rules, threads = load_rules(), torch.get_num_threads()
    nodes, outcomes = dict(sdg.nodes), {}
    try:
        for node in sdg.nodes.values():
            if not isinstance(node.op, FusedOp):
                continue
            edges = sdg.in_edges(node.id)
            island = Island(node.op, tuple(sdg.read_shape(e) for e in edges),
                            tuple(sdg.nodes[e.src].dtypes[e.src_out] for e in edges),
                            tuple(d.name for d in node.domain), dict(cfg.sizes))
            outcome = outcomes[node.id] = optimise(island, cfg.agent, cfg.budget_s, rules, **options)
            nodes[node.id] = replace(node, op=outcome.op)
            log.info("island %%%d: %d -> %d steps, %s", node.id, outcome.steps_before, outcome.steps_after,
                     outcome.kept or f"{outcome.before_ms:.4f} -> {outcome.after_ms:.4f} ms")
    finally:
        torch.set_num_threads(threads)   # optimize() times on one thread
    return replace(sdg, nodes=nodes), outcomes
