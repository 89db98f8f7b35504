"""MMap-MuZero alone on one instance, with ``MuZeroConfig`` fields overridden.

An analysis aid for comparing agent settings under one budget: it prints the
reward of the answer (the best game), the number of games and the mean return
of the first and the last quarter of them (is the agent learning?). A
discarded 3 s run first compiles the JAX functions outside the budget.

    python examples/memplan_muzero_runs.py INSTANCE.json --budget 60 --seed 0 demonstrations=True
"""
import argparse
import json
import time

import numpy as np

from tempo.memplan.agents.muzero import parsed_config, solve
from tempo.memplan.problem import load_instance
from tempo.memplan.validate import validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instance")
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", metavar="FIELD=VALUE")
    args = parser.parse_intermixed_args()
    config = parsed_config(parser, args.overrides)
    inst = load_instance(args.instance)
    solve(inst, 3.0, args.seed, config)
    start = time.perf_counter()
    result = solve(inst, args.budget, args.seed, config)
    validate(inst, result.solution)
    returns = [r for _, r in result.games]
    quarter = max(len(returns) // 4, 1)
    print(json.dumps({
        "instance": inst.name, "seed": args.seed, "overrides": args.overrides,
        "reward": round(result.solution.reward, 1), "games": len(returns),
        "seconds": round(time.perf_counter() - start, 1),
        "first_quarter_mean": round(float(np.mean(returns[:quarter])), 1),
        "last_quarter_mean": round(float(np.mean(returns[-quarter:])), 1)}))


if __name__ == "__main__":
    main()
