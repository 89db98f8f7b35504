"""The no-search ablation of Fig. 7: MMap-MuZero's learning with MCTS disabled."""
from __future__ import annotations

from tempo.memplan.agents.base import SearchResult
from tempo.memplan.agents.muzero import MuZeroConfig
from tempo.memplan.agents.muzero import solve as muzero_solve
from tempo.memplan.problem import Instance


def solve(inst: Instance, budget_seconds: float, seed: int = 0) -> SearchResult:
    """Self-play and learning without search (actions from the policy network)."""
    return muzero_solve(inst, budget_seconds, seed, MuZeroConfig(num_simulations=0))
