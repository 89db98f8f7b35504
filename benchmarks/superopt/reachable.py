"""Is any graph near the best baseline's result measurably faster than it?

For each workload: optimise with greedy, backtracking and eqsat, take the
fastest result by interleaved timing (B), then list graphs a few rewrites
away from B: every candidate one rewrite away, and for rewrites of the
``merge`` family (enlarge, merge convs/matmuls, which the cost model tends to
reject as temporarily slower) up to two further rewrites of the ``merge`` and
``concat`` families. Each graph is screened against B in a short interleaved
loop; the best screened graphs are re-timed against B and judged by the same
verdict as the benchmark (:func:`tempo.superopt.stats.paired_verdict`).
A *win* here means the rules can reach a graph faster than every baseline's
result, so a latency-driven agent has something to find.

Longer sequences are out of that neighbourhood's reach; ``--chain`` checks
one: it exhausts the first rule, then applies the rest of the chain wherever
the whole chain fits, as often as it does, starting from the input graph
(squeezenet: ``convb_relu enlarge_1x1b merge_convb concat_slices_c`` merges
the two expand convolutions of every fire module and drops its concat), and
times the result against the best baseline's.

    .venv/bin/python benchmarks/superopt/reachable.py --workloads bert vit
    .venv/bin/python benchmarks/superopt/reachable.py --scale medium
    .venv/bin/python benchmarks/superopt/reachable.py --workloads squeezenet \
        --chain convb_relu enlarge_1x1b merge_convb concat_slices_c
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from tqdm import tqdm

from tempo.files import write_bytes_atomic
from tempo.superopt.execute import time_interleaved
from tempo.superopt.graph import Graph
from tempo.superopt.models import SCALES, WORKLOADS, build
from tempo.superopt.optimize import optimize, same_outputs
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import load_rules
from tempo.superopt.stats import paired_speedup, paired_verdict

CHAIN_FAMILIES = ("merge", "concat")
SCREEN_ROUNDS = 4      # interleaved rounds of the screen, judged by the median paired ratio


def neighbourhood(graph: Graph, rules, depth: int = 3) -> dict[tuple, tuple[Graph, list[str]]]:
    """Graphs one rewrite from ``graph``, and merge chains up to ``depth`` rewrites long."""
    chain_rules = [r for r in rules if r.family in CHAIN_FAMILIES]
    found: dict[tuple, tuple[Graph, list[str]]] = {}
    frontier = []
    for c in candidates(graph, rules):
        found[c.graph.key()] = (c.graph, [c.rule.name])
        if c.rule.family == "merge":
            frontier.append((c.graph, [c.rule.name]))
    for _ in range(depth - 1):
        nxt = []
        for g, applied in frontier:
            for c in candidates(g, chain_rules):
                if c.graph.key() not in found:
                    found[c.graph.key()] = (c.graph, [*applied, c.rule.name])
                    nxt.append((c.graph, [*applied, c.rule.name]))
        frontier = nxt
    found.pop(graph.key(), None)
    return found


def exhaust(graph: Graph, rules) -> tuple[Graph, int]:
    """Apply ``rules`` (the first candidate each time) until none applies."""
    applied = 0
    while cands := candidates(graph, rules):
        graph, applied = cands[0].graph, applied + 1
    return graph, applied


def apply_chain(graph: Graph, chain: list) -> tuple[Graph, int]:
    """Apply the rule sequence ``chain`` wherever all of it fits, until it fits nowhere."""
    def extend(g: Graph, rest: list) -> Graph | None:
        if not rest:
            return g
        for c in candidates(g, rest[:1]):
            done = extend(c.graph, rest[1:])
            if done is not None:
                return done
        return None

    times = 0
    while (done := extend(graph, chain)) is not None:
        graph, times = done, times + 1
    return graph, times


def best_baseline(graph: Graph, rules, search_s: float, rounds: int) -> tuple[str, Graph]:
    """The fastest of the baselines' results, timed interleaved."""
    results = {m: optimize(graph, m, search_s, rules).graph for m in ("greedy", "backtrack", "eqsat")}
    lat = time_interleaved(results, rounds=rounds)
    name = min(results, key=lambda m: lat[m].median_ms)
    return name, results[name]


def check_chain(name: str, scale: str, rules, chain: list[str], search_s: float, rounds: int,
                compiles: int) -> dict:
    """The input with ``chain[0]`` exhausted and ``chain[1:]`` applied everywhere, against B."""
    by_name = {r.name: r for r in rules}
    graph = build(name, scale=scale)
    best_name, best = best_baseline(graph, rules, search_s, rounds)
    first, n_first = exhaust(graph, [by_name[chain[0]]])
    chained, n_chain = apply_chain(first, [by_name[c] for c in chain[1:]])
    assert same_outputs(graph, chained), f"{chain} changed {name}'s outputs"
    t = time_interleaved({"best": best, "chained": chained}, rounds=rounds, compiles=compiles)
    v = paired_verdict(t["best"], t["chained"], rounds, compiles)
    return {"best_baseline": best_name, "chain": chain, "first_rule_applied": n_first,
            "chain_applied": n_chain, **v.record()}


def explore(name: str, scale: str, rules, search_s: float, finalists: int, rounds: int,
            compiles: int) -> dict:
    """The best baseline's result against its neighbourhood, screened then re-timed.

    Each finalist is re-timed beside the best baseline's result and beside that
    result again under another name (the A/A control), with the benchmark's
    compiles and verdict per compile pair, so that a finalist's win can be read
    against how often the same graph is called faster than itself."""
    best_name, best = best_baseline(build(name, scale=scale), rules, search_s, rounds)
    near = neighbourhood(best, rules)
    screened = []
    for key, (g, applied) in tqdm(near.items(), desc=f"{name} screen", leave=False):
        t = time_interleaved({"best": best, "near": g}, rounds=SCREEN_ROUNDS)
        screened.append((paired_speedup(t["best"], t["near"], SCREEN_ROUNDS), key, applied))
    screened.sort(key=lambda s: -s[0])
    rows = []
    for i, (_, key, applied) in enumerate(screened[:finalists]):
        g = near[key][0]
        assert same_outputs(best, g), f"{applied} changed {name}'s outputs"
        t = time_interleaved({"best": best, "near": g, "best again": best}, rounds=rounds,
                             compiles=compiles, seed=i)
        v = paired_verdict(t["best"], t["near"], rounds, compiles)
        control = paired_verdict(t["best"], t["best again"], rounds, compiles)
        rows.append({"applied": applied, **v.record(), "control": control.record()})
    return {"best_baseline": best_name, "graphs_screened": len(near), "finalists": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--scale", default="small", choices=SCALES, help="the workloads' sizes")
    p.add_argument("--search-s", type=float, default=30.0, help="backtracking budget (s)")
    p.add_argument("--finalists", type=int, default=5, help="screened graphs re-timed")
    p.add_argument("--rounds", type=int, default=40, help="interleaved rounds of a re-timing")
    p.add_argument("--compiles", type=int, default=24,
                   help="compiles of each finalist and the best baseline's result, taken in turn")
    p.add_argument("--chain", nargs="+", help="rule names: exhaust the first, then apply the rest "
                   "as a sequence wherever it fits")
    p.add_argument("--out", default="benchmarks/results/superopt/reachable.json")
    ns = p.parse_args()
    torch.set_num_threads(1)
    rules = load_rules()
    report = {}
    for name in ns.workloads:
        if ns.chain:
            report[name] = r = check_chain(name, ns.scale, rules, ns.chain, ns.search_s,
                                           ns.rounds, ns.compiles)
            print(f"{name}: {r['first_rule_applied']} x {ns.chain[0]}, {r['chain_applied']} x "
                  f"{' -> '.join(ns.chain[1:])}; vs {r['best_baseline']}: {r['ratio']:.3f} "
                  f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] {r['verdict']}")
            continue
        report[name] = r = explore(name, ns.scale, rules, ns.search_s, ns.finalists, ns.rounds,
                                   ns.compiles)
        tqdm.write(f"{name}: best baseline {r['best_baseline']}, {r['graphs_screened']} graphs screened")
        for row in r["finalists"]:
            c = row["control"]
            tqdm.write(f"  {row['ratio']:.3f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] "
                       f"{row['verdict']:4s} {' -> '.join(row['applied'])} (A/A {c['ratio']:.3f} "
                       f"[{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] {c['verdict']})")
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    write_bytes_atomic(ns.out, json.dumps(report, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
