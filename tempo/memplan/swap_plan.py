"""The ``"memplan"`` swap plan: registered with :mod:`tempo.plan.swap` when ``tempo`` is imported.

``ctx.run(bounds, memory={"device_budget": ..., "plan": "memplan:AGENT"})`` keeps on the device
the swap candidates that AGENT's solution of the program's memory-mapping game keeps there
(:func:`tempo.memplan.extract.tempo_schedule.resident`; the heuristic by default).
"""
from __future__ import annotations

from tempo.memplan.agents import AGENTS
from tempo.plan import swap


def keeps(sdg, program, keep, bounds, budget, candidates, agent) -> set:
    """The ``candidates`` that ``agent``'s solution keeps on the device (the extractor is imported
    on first use, so ``import tempo`` stays quick)."""
    from tempo.memplan.extract import tempo_schedule

    return tempo_schedule.resident(sdg, program, keep, bounds, budget, candidates, agent)


swap.register("memplan", keeps, tuple(AGENTS))
