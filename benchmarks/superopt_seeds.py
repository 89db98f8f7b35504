"""How reliably does the RL agent optimise one workload? Several seeds and settings, in parallel.

A single benchmark run gives one seed's verdict per workload, and between
seeds the RL agent's result on one workload can go from a clear win to a
clear loss (docs/superopt_history.md). This script trains one agent per (setting,
seed) on one workload, each in its own process pinned to its own core,
runs greedy and backtracking there too, then times the input and every
result in one interleaved session (in this process) and judges each agent
against the best baseline with the benchmark's paired verdict. Settings are
:class:`~tempo.superopt.agent.PPOConfig` overrides, so two settings are
compared on the same seeds, workload and machine.

    .venv/bin/python benchmarks/superopt_seeds.py --workload squeezenet --seeds 0 1 2 3 \\
        --setting default --setting "entropy:c_entropy=0.03" --jobs 8

A setting is ``NAME`` (the defaults) or ``NAME:key=value,key=value``.
Each job's latencies are measured while the other jobs run on other cores,
so the timings are noisier than the headline benchmark's: use this to count
what the agent learns across seeds, and the headline run for speed-ups.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, fields

import numpy as np
import torch
from tqdm import tqdm

from tempo.errors import TempoError
from tempo.files import write_bytes_atomic
from tempo.superopt.agent import PPOConfig
from tempo.superopt.execute import BACKENDS, set_default_backend, time_interleaved
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.optimize import agent_function, same_outputs
from tempo.superopt.parallel import pinned_pool
from tempo.superopt.rules import load_rules
from tempo.superopt.stats import paired_verdict

BASELINES = ("greedy", "backtrack")


@dataclass(frozen=True)
class Job:
    """One optimisation: ``label`` names its result (a baseline, or ``setting/seed``)."""

    label: str
    agent: str
    budget_s: float
    overrides: tuple[tuple[str, object], ...] = ()
    seed: int = 0


def parse_setting(text: str) -> tuple[str, dict]:
    """``NAME`` or ``NAME:key=value,...`` -> (name, PPOConfig overrides); ValueError if bad."""
    name, _, items = text.partition(":")
    if not name:
        raise ValueError(f"setting '{text}' has no name")
    defaults = PPOConfig()
    known = {f.name for f in fields(PPOConfig)} - {"seed", "rule_names"}
    overrides = {}
    for item in filter(None, items.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in known:
            raise ValueError(f"setting '{text}': '{item}' is not KEY=VALUE with KEY one of "
                             f"{', '.join(sorted(known))}")
        default = getattr(defaults, key)
        kind = int if default is None else type(default)     # None-default fields count things
        try:
            overrides[key] = None if value == "None" else kind(value)
        except ValueError:
            raise ValueError(f"setting '{text}': {key} takes {kind.__name__} values, not '{value}'") from None
    try:
        PPOConfig(**overrides)
    except TempoError as err:
        raise ValueError(f"setting '{text}': {err}") from None
    return name, overrides


def _optimise(job_workload: tuple[Job, str]):
    """One job on the workload, in a worker: the job, its graph, rules applied and seconds."""
    job, workload = job_workload
    graph = build(workload, scale="small")
    options = {}
    if job.agent == "rl":
        options = {"progress": False, "config": PPOConfig(seed=job.seed, **dict(job.overrides))}
    start = time.perf_counter()
    result = agent_function(job.agent)(graph, load_rules(), job.budget_s, **options)
    return job, result.graph, result.applied, time.perf_counter() - start


def run_jobs(jobs: list[Job], workload: str, backend: str, workers: int) -> dict:
    """Every job in a pool of ``workers`` processes, one core each: label -> (graph, applied, s)."""
    done = {}
    with pinned_pool(workers, backend) as pool:
        results = pool.imap_unordered(_optimise, [(job, workload) for job in jobs])
        for job, graph, applied, seconds in tqdm(results, total=len(jobs), desc="jobs", unit="job"):
            done[job.label] = (graph, applied, seconds)
    return done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="squeezenet", choices=list(WORKLOADS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--setting", action="append", default=None,
                   help="NAME or NAME:key=value,... (PPOConfig overrides); repeatable")
    p.add_argument("--train-s", type=float, default=420.0, help="RL budget per agent (s)")
    p.add_argument("--search-s", type=float, default=30.0, help="backtracking budget (s)")
    p.add_argument("--rounds", type=int, default=40, help="interleaved timing rounds")
    p.add_argument("--compiles", type=int, default=24,
                   help="compiles per graph in the timing, taken in turn round by round "
                        "(as benchmarks/superopt.py)")
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                   help="processes at once, one core each")
    p.add_argument("--backend", default="torch", choices=list(BACKENDS))
    p.add_argument("--out", default="benchmarks/results/superopt_seeds.json")
    args = p.parse_args()
    if args.compiles < 1:
        p.error(f"--compiles must be at least 1, not {args.compiles}")
    try:
        settings = dict(parse_setting(s) for s in args.setting or ["default"])
    except ValueError as err:
        p.error(str(err))
    set_default_backend(args.backend)
    torch.set_num_threads(1)
    jobs = [Job(b, b, args.search_s) for b in BASELINES]
    jobs += [Job(f"{name}/{seed}", "rl", args.train_s, tuple(over.items()), seed)
             for name, over in settings.items() for seed in args.seeds]
    start = time.perf_counter()
    done = run_jobs(jobs, args.workload, args.backend, min(args.jobs, len(jobs)))
    graph = build(args.workload, scale="small")
    for label, (result, _, _) in done.items():
        assert same_outputs(graph, result), f"{label} changed {args.workload}'s outputs"
    latency = time_interleaved({"input": graph, **{k: v[0] for k, v in done.items()}},
                               rounds=args.rounds, compiles=args.compiles)
    best = min(BASELINES, key=lambda b: latency[b].median_ms)
    rows = {}
    for job in jobs:
        graph_, applied, seconds = done[job.label]
        v = paired_verdict(latency[best], latency[job.label], args.rounds, args.compiles)
        rows[job.label] = {"speedup": latency["input"].median_ms / latency[job.label].median_ms,
                           "vs_best": v.record(),
                           "applied": applied, "optimise_s": seconds}
    report = {"workload": args.workload, "backend": args.backend, "seeds": args.seeds,
              "settings": settings, "budgets_s": {"rl": args.train_s, "search": args.search_s},
              "rounds": args.rounds, "compiles": args.compiles, "best_baseline": best,
              "results": rows,
              "seconds": time.perf_counter() - start}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_bytes_atomic(args.out, json.dumps(report, indent=1).encode())
    print(table(report))
    print(f"\n{report['seconds']:.0f} s; JSON: {args.out}")
    return 0


def table(report: dict) -> str:
    """Per result: speed-up, its verdict against the best baseline, and its commonest rules;
    per setting: the verdict counts and the median speed-up."""
    lines = [f"{report['workload']}, best baseline: {report['best_baseline']}", "",
             "| result | speed-up | best / it [95% CI] | verdict | rewrites | commonest rules |",
             "|---|---|---|---|---|---|"]
    for label, r in report["results"].items():
        v = r["vs_best"]
        common = ", ".join(f"{k} x{n}" for k, n in Counter(r["applied"]).most_common(4))
        lines.append(f"| {label} | {r['speedup']:.3f} | {v['ratio']:.3f} [{v['ci95'][0]:.3f}, "
                     f"{v['ci95'][1]:.3f}] | {v['verdict']} | {len(r['applied'])} | {common} |")
    lines += ["", "| setting | win / tie / loss | median speed-up |", "|---|---|---|"]
    for name in report["settings"]:
        mine = [r for k, r in report["results"].items() if k.split("/")[0] == name]
        verdicts = [r["vs_best"]["verdict"] for r in mine]
        lines.append(f"| {name} | {verdicts.count('win')} / {verdicts.count('tie')} / "
                     f"{verdicts.count('loss')} | "
                     f"{np.median([r['speedup'] for r in mine]):.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
