"""How often the seed-spread criterion holds between two sets of runs of the *same* system.

Issue 46's learning target reads: Tempo's mean curve (over its seeds) lies
within the baseline's seed spread (min to max over its seeds) at every 10%
of the run. This script asks how strict that test is by itself: from the
runs of ``benchmarks/rl_learning.py`` result files (no new training), it
draws every pair of ``--size``-seed groups and checks the criterion
for each pair

- of one system against itself, where it has twice ``--size`` seeds (a
  group's mean against a disjoint group's spread: two samples of one
  algorithm),
- of Tempo against the baseline (Tempo's group mean against a baseline
  group's spread), and the reverse,

and prints the fraction of pairs that pass at every tenth, and per tenth;
and, per tenth, an exact rank-sum (Mann-Whitney) test of all of Tempo's
seeds against all of the baseline's.
Where the baseline passes against itself about as often as Tempo passes
against it, the criterion's misses are the seeds' chance, not a difference
of the algorithms.

    .venv/bin/python benchmarks/rl_spread_criterion.py --env HalfCheetah-v5 \\
        --results docs/results/rl_learning_halfcheetah_300k_env_matched.json \\
                  docs/results/rl_learning_halfcheetah_300k_tempo_seeds_4_6.json \\
                  docs/results/rl_learning_halfcheetah_300k_cleanrl_seeds_4_6.json \\
                  docs/results/rl_learning_halfcheetah_300k_tempo_seeds_7_9.json \\
                  docs/results/rl_learning_halfcheetah_300k_cleanrl_seeds_7_9.json \\
        --out docs/results/rl_spread_criterion_halfcheetah_300k
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from rl_learning import curve  # noqa: E402  (the curve rl_learning.py summarises)

sys.path.insert(0, ROOT)
from tempo.files import write_json_atomic  # noqa: E402


def curves_by_seed(paths: list[str], env_id: str) -> dict[str, dict[int, np.ndarray]]:
    """Per system and seed, the mean return of the last 20 episodes at each tenth of the run (the first file
    holding a system's seed wins); an error where the runs' step budgets differ."""
    out: dict[str, dict[int, np.ndarray]] = {}
    budgets = set()
    for path in paths:
        with open(path) as f:
            runs = json.load(f)["runs"]
        for run in runs:
            if run.get("env") != env_id or "episodes" not in run:
                continue
            budgets.add(run["steps"])
            grid = np.linspace(run["steps"] / 10, run["steps"], 10)
            out.setdefault(run["system"], {}).setdefault(run["seed"], curve(run["episodes"], grid, 0))
    if len(budgets) > 1:
        raise SystemExit(f"the runs of {env_id} have different step budgets: {sorted(budgets)}")
    return out


def within(mean_of: np.ndarray, spread_of: np.ndarray) -> np.ndarray:
    """Per tenth: whether the mean of the curves ``mean_of`` lies within the min-max of the curves ``spread_of``."""
    mean = mean_of.mean(axis=0)
    return (spread_of.min(axis=0) <= mean) & (mean <= spread_of.max(axis=0))


def pass_rates(a: dict[int, np.ndarray], b: dict[int, np.ndarray], size: int) -> dict:
    """Over every pair of a ``size``-seed group of ``a`` and a disjoint one of ``b``: the fraction that passes at
    every tenth, and per tenth."""
    hits = []
    for group_a in itertools.combinations(sorted(a), size):
        for group_b in itertools.combinations(sorted(b), size):
            if a is b and set(group_a) & set(group_b):
                continue
            hits.append(within(np.array([a[s] for s in group_a]), np.array([b[s] for s in group_b])))
    hits = np.array(hits)
    return {"pairs": len(hits), "every_tenth": float(hits.all(axis=1).mean()),
            "per_tenth": hits.mean(axis=0).round(3).tolist()}


def rank_sum_p(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided exact p-value of the rank-sum (Mann-Whitney) test of samples ``a`` and ``b``: the fraction
    of the ways to split the pooled values into groups of their sizes whose rank sum lies at least as far from
    its mean as ``a``'s does."""
    pooled = np.concatenate([a, b])
    ranks = np.argsort(np.argsort(pooled, kind="stable"), kind="stable") + 1.0
    for value in np.unique(pooled):  # ties share their mean rank
        ranks[pooled == value] = ranks[pooled == value].mean()
    centre = len(a) * (len(pooled) + 1) / 2
    observed = abs(ranks[:len(a)].sum() - centre)
    sums = np.array([ranks[list(group)].sum() for group in itertools.combinations(range(len(pooled)), len(a))])
    return float((np.abs(sums - centre) >= observed - 1e-9).mean())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="the environment id of the runs")
    parser.add_argument("--results", nargs="+", required=True, help="rl_learning.py result files")
    parser.add_argument("--baseline", default="cleanrl", help="the system whose spread is the criterion's")
    parser.add_argument("--size", type=int, default=3, help="seeds per group (the benchmark's 3)")
    parser.add_argument("--out", default=None, help="writes <out>.json")
    args = parser.parse_args(argv)
    curves = curves_by_seed(args.results, args.env)
    tempo, base = curves.get("tempo", {}), curves.get(args.baseline, {})
    if len(tempo) < args.size or len(base) < args.size or max(len(tempo), len(base)) < 2 * args.size:
        raise SystemExit(f"need {args.size} seeds of each system and {2 * args.size} of one; the files hold "
                         f"tempo {sorted(tempo)}, {args.baseline} {sorted(base)}")
    result = {"env": args.env, "results": args.results, "size": args.size,
              "seeds": {"tempo": sorted(tempo), args.baseline: sorted(base)}}
    for name, runs in ((args.baseline, base), ("tempo", tempo)):
        if len(runs) >= 2 * args.size:  # two disjoint groups of one system
            result[f"{name}_against_itself"] = pass_rates(runs, runs, args.size)
    result[f"tempo_against_{args.baseline}"] = pass_rates(tempo, base, args.size)
    result[f"{args.baseline}_against_tempo"] = pass_rates(base, tempo, args.size)
    tempo_curves, base_curves = np.array([tempo[s] for s in sorted(tempo)]), np.array([base[s] for s in sorted(base)])
    result["rank_sum_p_per_tenth"] = [round(rank_sum_p(tempo_curves[:, k], base_curves[:, k]), 3) for k in range(10)]
    result["mean_per_tenth"] = {"tempo": tempo_curves.mean(axis=0).round(1).tolist(),
                                args.baseline: base_curves.mean(axis=0).round(1).tolist()}
    print(f"{args.env}: {args.size}-seed groups, seeds tempo {sorted(tempo)}, {args.baseline} {sorted(base)}")
    print(f"{'mean of':<10} {'spread of':<10} {'pairs':>6} {'every tenth':>12}  per tenth (10% ... 100%)")
    for key, rates in result.items():
        if isinstance(rates, dict) and "pairs" in rates:
            mean_of, spread_of = key.split("_against_")
            spread_of = mean_of if spread_of == "itself" else spread_of
            print(f"{mean_of:<10} {spread_of:<10} {rates['pairs']:>6} {rates['every_tenth']:>12.3f}  "
                  f"{' '.join(f'{x:.2f}' for x in rates['per_tenth'])}")
    print(f"rank-sum test, every seed of tempo against every seed of {args.baseline}, p per tenth: "
          f"{' '.join(f'{x:.3f}' for x in result['rank_sum_p_per_tenth'])}")
    if args.out:
        write_json_atomic(f"{args.out}.json", result)
        print(f"wrote {args.out}.json")
    return result


if __name__ == "__main__":
    main()
