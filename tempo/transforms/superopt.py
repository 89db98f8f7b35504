"""The superoptimiser on the static islands the fuse pass made (off unless configured).

Each :class:`~tempo.ir.ops.FusedOp` is translated to a tensor graph of
:mod:`tempo.superopt`, rewritten by one of its cost-model searches (TASO's
greedy or backtracking search over the rule set, operators timed with NumPy,
the runtime's backend) and translated back; see :mod:`tempo.superopt.islands`
for what is translated and for the checks a rewritten island must pass to
replace the original. Running before code generation, the pass sees each
island once, whatever the number of points it runs at.

    ctx.compile(passes={"superopt": superopt.Config(agent="greedy", sizes={"B": 32})})
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from tempo.errors import TempoError
from tempo.ir.ops import FusedOp
from tempo.ir.sdg import SDG

SEARCHES = ("greedy", "backtrack")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    """``agent``: ``greedy`` or ``backtrack`` (None: the pass leaves the program alone);
    ``budget_s``: search seconds per island; ``sizes``: the size each bound symbol
    (``B``, ``T``...) stands for while operators are timed (others: 16)."""

    agent: str | None = None
    budget_s: float = 1.0
    sizes: dict = field(default_factory=dict, hash=False)


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every island the search improved replaced by its rewrite."""
    return optimise_islands(sdg, cfg)[0] if cfg.agent is not None else sdg


def optimise_islands(sdg: SDG, cfg: Config) -> tuple[SDG, dict]:
    """The rewritten SDG and, per FusedOp node id, its :class:`~tempo.superopt.islands.Outcome`."""
    from tempo.superopt.costmodel import CostModel
    from tempo.superopt.islands import Island, optimise
    from tempo.superopt.optimize import agent_function
    from tempo.superopt.rules import load_rules

    if cfg.agent not in SEARCHES:
        raise TempoError(f"the superopt pass runs a cost-model search ({', '.join(SEARCHES)}), "
                         f"not {cfg.agent!r}")
    search, rules, model = agent_function(cfg.agent), load_rules(), CostModel(backend="numpy")
    nodes, outcomes = dict(sdg.nodes), {}
    for node in sdg.nodes.values():
        if not isinstance(node.op, FusedOp):
            continue
        edges = sdg.in_edges(node.id)
        island = Island(node.op, tuple(sdg.read_shape(e) for e in edges),
                        tuple(sdg.nodes[e.src].dtypes[e.src_out] for e in edges))
        outcome = optimise(island, search, cfg.budget_s, dict(cfg.sizes), [d.name for d in node.domain],
                           rules, model)
        outcomes[node.id] = outcome
        if outcome.op is not node.op:
            nodes[node.id] = replace(node, op=outcome.op)
        log.info("island %%%d: %d -> %d steps%s", node.id, outcome.steps_before, outcome.steps_after,
                 f" ({outcome.kept})" if outcome.kept else "")
    return replace(sdg, nodes=nodes), outcomes

