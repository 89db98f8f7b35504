"""The superopt pass's optimiser (:mod:`tempo.transforms.superopt`), registered when tempo is imported.

Each :class:`~tempo.ir.ops.FusedOp` island is translated to a tensor graph,
rewritten by one of the optimisers and translated back
(:func:`tempo.superopt.islands.optimise`). The optimisers and torch are
imported on the pass's first use, so ``import tempo`` stays quick.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from tempo.ir.ops import FusedOp
from tempo.ir.sdg import SDG
from tempo.transforms import superopt

log = logging.getLogger(__name__)


def optimise_islands(sdg: SDG, cfg: superopt.Config) -> tuple[SDG, dict]:
    """The rewritten SDG and, per FusedOp node id, its :class:`~tempo.superopt.islands.Outcome`."""
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


superopt.register(optimise_islands)
