"""Fixed action preferences in the memory-mapping game, played with Drop-backup.

An analysis aid, not an agent: it shows which choice matters on a program.
Each policy plays one game, taking at every decision point the first legal
action of its preference order (outputs and operands may have different
orders); automatic moves and Drop-backup are those of MMap-MuZero.

    python examples/memplan_fixed_policies.py INSTANCE.json [INSTANCE.json ...]

On the benchmark's transformer programs, keeping outputs resident (NoCopy:
the whole live range) instead of evicting them (Copy) loses most of the
reward; that is the choice MMap-MuZero's learning gets wrong (docs/memplan.md).
"""
import argparse

from tempo.memplan.agents.episode import Episode
from tempo.memplan.game import COPY, DROP, NOCOPY
from tempo.memplan.problem import Instance, load_instance

# name -> (preference for output buffers, preference for operand buffers)
POLICIES = {
    "copy first": ((COPY, NOCOPY, DROP), (COPY, NOCOPY, DROP)),
    "nocopy first": ((NOCOPY, COPY, DROP), (NOCOPY, COPY, DROP)),
    "outputs copy, operands nocopy": ((COPY, NOCOPY, DROP), (NOCOPY, COPY, DROP)),
    "outputs nocopy, operands copy": ((NOCOPY, COPY, DROP), (COPY, NOCOPY, DROP)),
}


def play(inst: Instance, outputs: tuple, operands: tuple) -> float:
    """The return of one game that always plays the first legal action of the buffer's order."""
    ep = Episode(inst)
    ep.settle()
    while not ep.game.done:
        legal = ep.legal()
        order = outputs if ep.game.current.is_output else operands
        ep.game.step(next(a for a in order if legal[a]))
        ep.after_move()
        ep.settle()
    return ep.game.total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="+")
    args = parser.parse_args()
    print("| instance | " + " | ".join(POLICIES) + " |")
    print("|---|" + "---:|" * len(POLICIES))
    for path in args.instances:
        inst = load_instance(path)
        returns = [play(inst, *orders) for orders in POLICIES.values()]
        print(f"| {inst.name} | " + " | ".join(f"{r:.1f}" for r in returns) + " |")


if __name__ == "__main__":
    main()
