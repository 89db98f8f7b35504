"""Fixed action preferences in the memory-mapping game, played with Drop-backup.

An analysis aid, not an agent: it shows which choice matters on a program.
Each policy plays one game, taking at every decision point the first legal
action of its preference order (outputs and operands may have different
orders); automatic moves and Drop-backup are those of MMap-MuZero.

    python examples/memplan_fixed_policies.py INSTANCE.json [INSTANCE.json ...]

On the benchmark's transformer programs, keeping outputs resident (NoCopy:
the whole live range) instead of evicting them (Copy) loses about a quarter
of the reward; that is the choice MMap-MuZero's learned reward cannot resolve
without the root lookahead (docs/memplan.md).
The ``density >= x`` columns also skip any placement whose benefit per unit of
memory-time is below ``x``: which placements are worth their memory matters
as much. The last column takes, at every decision point, the legal move with
the best one-move priced reward: the return that move and the automatic moves
after it add, less the fast memory they hold at the fractional knapsack's
price (``memory_price``), each move played and taken back. That is the
lookahead MMap-MuZero's search starts from at its root, without any network.
"""
import argparse

import numpy as np

from tempo.memplan.agents.episode import Episode
from tempo.memplan.features import benefit_scale, memory_price
from tempo.memplan.game import COPY, DROP, NOCOPY
from tempo.memplan.problem import Instance, load_instance

COPY_FIRST, NOCOPY_FIRST = (COPY, NOCOPY, DROP), (NOCOPY, COPY, DROP)
# name -> (preference for output buffers, preference for operand buffers, least density placed)
POLICIES = {
    "copy first": (COPY_FIRST, COPY_FIRST, 0.0),
    "nocopy first": (NOCOPY_FIRST, NOCOPY_FIRST, 0.0),
    "outputs copy, operands nocopy": (COPY_FIRST, NOCOPY_FIRST, 0.0),
    "outputs nocopy, operands copy": (NOCOPY_FIRST, COPY_FIRST, 0.0),
    "copy first, density >= 0.3": (COPY_FIRST, COPY_FIRST, 0.3),
    "nocopy first, density >= 0.3": (NOCOPY_FIRST, NOCOPY_FIRST, 0.3),
}


def dense_enough(game, action: int, least_density: float, scale: float) -> bool:
    """Whether ``action`` reserves no memory, or its buffer's benefit (in units of ``scale``) per
    unit of the memory-time it reserves (capacity fractions x steps) is at least ``least_density``."""
    p, b = game.options()[action], game.current
    if p.interval is None:
        return True
    area = b.size / game.inst.capacity * (p.interval[1] - p.interval[0] + 1)
    return b.benefit / scale >= least_density * area


def play(inst: Instance, outputs: tuple, operands: tuple, least_density: float) -> float:
    """The return of one game that plays the first legal, dense enough action of the buffer's order
    (the last legal action when none is)."""
    scale = benefit_scale(inst)
    ep = Episode(inst)

    def choose() -> int:
        legal = ep.legal()
        order = outputs if ep.game.current.is_output else operands
        fine = [a for a in order if legal[a] and dense_enough(ep.game, a, least_density, scale)]
        return fine[0] if fine else int(legal.nonzero()[0][-1])

    ep.play(choose)
    return ep.game.total


def play_lookahead(inst: Instance) -> float:
    """The return of one game that plays the legal move with the best one-move priced reward
    (Drop when every move loses the game)."""
    price = memory_price(inst)
    ep = Episode(inst)

    def choose() -> int:
        legal = ep.legal()
        best, choice = -np.inf, int(np.flatnonzero(legal)[-1])
        for a in np.flatnonzero(legal):
            gained = ep.lookahead(int(a))
            if gained is not None and gained[0] - price * gained[1] > best:
                best, choice = gained[0] - price * gained[1], int(a)
        return choice

    ep.play(choose)
    return ep.game.total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="+")
    args = parser.parse_args()
    print("| instance | " + " | ".join(POLICIES) + " | best one-move priced reward |")
    print("|---|" + "---:|" * (len(POLICIES) + 1))
    for path in args.instances:
        inst = load_instance(path)
        returns = [play(inst, *orders) for orders in POLICIES.values()] + [play_lookahead(inst)]
        print(f"| {inst.name} | " + " | ".join(f"{r:.1f}" for r in returns) + " |")


if __name__ == "__main__":
    main()
