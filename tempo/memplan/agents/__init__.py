"""The agents that play the memory-mapping game, by name.

Each is ``solve(instance, budget_seconds, seed) -> SearchResult``; modules are
imported only when their agent is asked for, so the heuristic never loads JAX (and ``import tempo``,
which registers the names, loads none of them).
"""
from __future__ import annotations

import importlib

# agent name -> module with solve(inst, budget_seconds, seed)
AGENTS = {
    "heuristic": "tempo.memplan.agents.heuristic",
    "random": "tempo.memplan.agents.random_play",
    "es": "tempo.memplan.agents.es",
    "es-linear": "tempo.memplan.agents.es_linear",
    "muzero": "tempo.memplan.agents.muzero",
    "nosearch": "tempo.memplan.agents.nosearch",
    "mcts": "tempo.memplan.agents.pure_mcts",
    "hybrid": "tempo.memplan.agents.hybrid",
}


def get_agent(name: str):
    """The ``solve`` function of agent ``name``."""
    from tempo.memplan.problem import MemplanError

    if name not in AGENTS:
        raise MemplanError(f"unknown agent '{name}' (choose from {', '.join(AGENTS)})")
    return importlib.import_module(AGENTS[name]).solve
