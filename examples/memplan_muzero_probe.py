"""What MMap-MuZero's learned model says about Copy against NoCopy, and what the game says.

An analysis aid: it trains the agent in rounds and after each round plays one
game by the search's best action, probing the first ``--decisions`` decision
points. At each one where both Copy and NoCopy are legal it compares, NoCopy
minus Copy: the training reward the game gives (each move played and taken
back, memory price included), the learned reward, the discounted learned value
of the next latent state, and the policy network's logits. It prints how often
each of them prefers NoCopy, the mean differences, and how often the search's
choice is the game's best one-move reward.

    python examples/memplan_muzero_probe.py INSTANCE.json --rounds 3 --seconds 20 lookahead=False

With ``lookahead=False`` (the paper's search: learned rewards at the root) on
transformer24 the trained reward head puts NoCopy and Copy within 0.05 reward
units of each other where the game says NoCopy is worth about 0.9 less: it
only learns the reward of the moves self-play plays (docs/memplan.md, "Why the
root lookahead").
"""
import argparse

import numpy as np

from tempo.memplan.agents.base import Tracker
from tempo.memplan.agents.episode import Episode
from tempo.memplan.agents.muzero import MuZeroAgent, parsed_config
from tempo.memplan.game import COPY, NOCOPY
from tempo.memplan.problem import load_instance


def probe(agent: MuZeroAgent, decisions: int) -> dict:
    """Play one game by the search's best action and compare the model with the game."""
    import jax.numpy as jnp

    from tempo.memplan.agents import muzero_nets as nets

    ep = Episode(agent.inst)
    ep.settle()
    rows, agrees, seen = [], 0, 0
    while not ep.game.done and seen < decisions:
        legal = ep.legal()
        observation = agent.observer(ep.game)
        truth = agent._lookahead(ep, legal)
        latent = nets.represent(agent.params, agent._batch([observation]))[:1]
        prior = np.asarray(nets.predict(agent.params, latent)[0][0])
        reward, value = np.zeros(3), np.zeros(3)
        for a in range(3):
            after, r = nets.dynamics(agent.params, latent, jnp.full((1,), a))
            reward[a] = float(nets.to_scalar(r)[0])
            value[a] = float(nets.to_scalar(nets.predict(agent.params, after)[1])[0])
        policy, _, _ = agent.act([observation], legal[None],
                                 truth[None] if agent.config.lookahead else None)
        action = int(np.argmax(np.where(legal, policy[0], -1.0)))
        if legal[COPY] and legal[NOCOPY] and not np.isnan(truth[[COPY, NOCOPY]]).any():
            rows.append([truth[NOCOPY] - truth[COPY], reward[NOCOPY] - reward[COPY],
                         agent.config.discount * (value[NOCOPY] - value[COPY]),
                         prior[NOCOPY] - prior[COPY]])
        if legal.sum() > 1 and not np.isnan(truth[legal]).all():
            seen += 1
            agrees += action == int(np.nanargmax(truth))
        ep.game.step(action)
        ep.after_move()
        ep.settle()
    table = np.array(rows).reshape(-1, 4)
    return {"decisions": seen, "search picks the best one-move reward": agrees / max(seen, 1),
            **{f"{name} prefers NoCopy": float(np.mean(table[:, i] > 0))
               for i, name in enumerate(("game", "learned reward", "learned value", "policy"))},
            **{f"mean NoCopy - Copy, {name}": float(np.mean(table[:, i]))
               for i, name in enumerate(("game", "learned reward", "discounted value",
                                         "policy logits"))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instance")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--decisions", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", metavar="FIELD=VALUE")
    args = parser.parse_intermixed_args()
    inst = load_instance(args.instance)
    agent = MuZeroAgent(inst, parsed_config(parser, args.overrides), args.seed)
    results = [("untrained", probe(agent, args.decisions))]
    for r in range(args.rounds):
        agent.run(Tracker(inst, args.seconds))
        results.append((f"after {args.seconds * (r + 1):.0f} s", probe(agent, args.decisions)))
    keys = list(results[0][1])
    print("| | " + " | ".join(name for name, _ in results) + " |")
    print("|---|" + "---:|" * len(results))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{row[key]:.2f}" if isinstance(row[key], float)
                                         else str(row[key]) for _, row in results) + " |")


if __name__ == "__main__":
    main()
