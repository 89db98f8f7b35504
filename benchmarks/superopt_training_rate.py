"""How much training the RL agent gets in a fixed time, with and without re-using measurements.

For each workload, the agent trains on the whole graph for ``--seconds``
twice, one setting after the other: every visit of a graph measured (the
default, ``measurements_per_graph=None``), then a graph's first 3
measurements re-used on later visits (``measurements_per_graph=3``). Printed
and written as JSON: PPO updates, episodes, end-to-end measurements taken and
distinct graphs measured.

    .venv/bin/python benchmarks/superopt_training_rate.py --workloads inception --seconds 120
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from tempo.files import write_bytes_atomic
from tempo.superopt.agent import Agent, PPOConfig, make_env
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.rules import load_rules

SETTINGS = {"every visit measured": None, "first 3 re-used": 3}


def train_once(name: str, seconds: float, measurements_per_graph: int | None, rules) -> dict:
    """Train a fresh agent on ``name`` for ``seconds``; what it got through."""
    config = replace(PPOConfig(), measurements_per_graph=measurements_per_graph)
    env = make_env(build(name, scale="small"), rules, config)
    taken = [0]
    measure = env._measure

    def counted(graph):
        taken[0] += 1
        return measure(graph)

    env._measure = counted
    log = Agent(config, rules).train(env, seconds, progress=False)
    return {"updates": log.updates, "episodes": len(log.returns), "measurements": taken[0],
            "distinct_graphs": len(env.measured)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=["inception"], choices=list(WORKLOADS))
    p.add_argument("--seconds", type=float, default=120.0, help="training time per setting")
    p.add_argument("--out", default="benchmarks/results/superopt_training_rate.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    rules = load_rules()
    report = {"seconds": args.seconds, "workloads": {}}
    print("| workload | setting | updates | episodes | measurements | distinct graphs |")
    print("|---|---|---|---|---|---|")
    for name in args.workloads:
        rows = report["workloads"][name] = {}
        for setting, n in SETTINGS.items():
            r = rows[setting] = train_once(name, args.seconds, n, rules)
            print(f"| {name} | {setting} | {r['updates']} | {r['episodes']} | {r['measurements']} | "
                  f"{r['distinct_graphs']} |", flush=True)
    write_bytes_atomic(args.out, json.dumps(report, indent=2).encode())
    print(f"JSON: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
