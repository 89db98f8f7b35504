"""X-RLflow benchmark: speed-ups of greedy, backtracking, TASO, equality saturation and RL.

For each workload the unoptimised graph and every method's result are timed
in one interleaved loop (torch backend, one thread, median of repeats), so
the speed-ups share the same noise. The RL agent is compared with the best
baseline (the fastest of greedy, backtracking, taso and eqsat in that same
loop) by :func:`tempo.superopt.stats.paired_verdict`: win / tie / loss from the
distribution-free 95% interval of the median latency ratio, one ratio per pair
of compiles (the median of the rounds that ran that pair); a tie without
timing when the two graphs are structurally identical (timing the same graph
twice only measures noise). A method's result that ``optimize``'s never-slower
check refused is timed too (``METHOD searched``), and the searches themselves
are compared as well (``search_vs_search``: each method's result before that
check): on a noisy machine the check can refuse a result that is faster.
``taso`` is backtracking under TASO's own sum, which charges weight-only
operators (``CostModel(fold_weights=False)``), the search X-RLflow compares
against; ``rl_vs_taso`` is that comparison, beside the verdict against the
best baseline. Greedy's graph is timed a second time under another name, an
A/A control of the verdict. Also: each method's optimisation time, the Fig. 7
run (an agent trained on one input shape, evaluated on three others) and the
Fig. 5 heatmap of the rules the RL agent applied. One report (JSON, and the
heatmap beside it) per seed; ``summary.py`` judges several together.

    .venv/bin/python benchmarks/superopt/speedups.py --quick        # short budgets, ~4 minutes
    .venv/bin/python benchmarks/superopt/speedups.py --seed 16 --jobs 2  # one report, ~25 minutes
    .venv/bin/python benchmarks/superopt/speedups.py --scale medium  # between the small and published shapes
    .venv/bin/python benchmarks/superopt/speedups.py --scale full    # the published shapes (hours on CPU)
    .venv/bin/python benchmarks/superopt/speedups.py --backend torch-cuda --train-s 90 --search-s 15
    .venv/bin/python benchmarks/superopt/speedups.py --backend jax --jobs 2  # on XLA, ~30 minutes

With ``--jobs N`` the searches (every method, workload and seed) run N at a
time, each in its own process on its own core; their measurements (rewards,
cost model, never-slower checks) then share the machine. The final
interleaved timing runs afterwards, alone.

The default is each workload's small shapes (``--scale small``): on a shared
CPU one run of a full-size graph takes 20-100 ms with an interquartile range
of 20-80% of the median, too slow for RL training and too noisy to rank
graphs.

The final timing compiles every graph ``--compiles`` times (default 24) and
takes the compiles in turn, round by round, so that where one compile's
weights lie does not decide a verdict. Each compile holds its own copy of the
weights: at the full scale that is gigabytes, so pass a smaller ``--compiles``
there.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from tempo.files import write_bytes_atomic
from tempo.superopt.agent import PPOConfig, optimize_with_agent
from tempo.superopt.execute import BACKENDS, set_default_backend, time_interleaved
from tempo.superopt.models import SCALES, WORKLOADS, build
from tempo.superopt.optimize import Outcome, optimize, same_outputs
from tempo.superopt.parallel import pinned_pool
from tempo.superopt.rules import load_rules
from tempo.superopt.stats import paired_verdict, round_medians, round_ratios

BASELINES = ("greedy", "backtrack", "taso", "eqsat")
FIG7 = "bert"            # the workload whose agent is evaluated on other shapes
METHODS = (*BASELINES, "rl")


@dataclass
class Args:
    """Benchmark settings."""

    quick: bool          # short budgets
    scale: str           # the workloads' sizes (models.SCALES)
    workloads: list[str]  # which workloads to run
    search_s: float      # budget of the backtracking search per workload
    train_s: float       # RL budget per workload (training, then best-of-K inference)
    rounds: int          # interleaved timing rounds of the final graphs
    compiles: int        # compiles per graph in that timing, taken in turn round by round
    seeds: list[int]     # the RL agent's seeds: one report per seed
    jobs: int            # searches run at once, one process and core each
    out: str             # JSON output path (with several seeds: one per seed, _sS before .json)
    shaping: float       # cost-model shaping weight at the start of training
    shaping_final: float  # ... and at its end (linear in between)
    backend: str         # where graphs are measured and run (execute.BACKENDS)


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short budgets")
    p.add_argument("--scale", default="small", choices=SCALES,
                   help="the workloads' sizes: small (default), medium, or full (the published ones)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--search-s", type=float, default=None, help="backtracking budget (s)")
    p.add_argument("--train-s", type=float, default=None,
                   help="RL budget (s): training, then best-of-K inference")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds")
    p.add_argument("--compiles", type=int, default=24,
                   help="compiles per graph in the final timing, taken in turn round by round "
                        "(execute.time_interleaved)")
    p.add_argument("--seed", type=int, nargs="+", default=[0],
                   help="the RL agent's seed; several: one report each")
    p.add_argument("--jobs", type=int, default=1,
                   help="searches at once, each in its own process on its own core; the final "
                        "timing always runs alone, after every search")
    p.add_argument("--out", default="benchmarks/results/superopt/speedups.json")
    p.add_argument("--shaping", type=float, default=PPOConfig.shaping,
                   help="the RL agent's cost-model shaping weight at the start of training")
    p.add_argument("--shaping-final", type=float, default=PPOConfig.shaping_final,
                   help="... and at its end, linear in between (equal to --shaping: constant)")
    p.add_argument("--backend", default="torch", choices=list(BACKENDS),
                   help="where every graph is measured and timed (torch-cuda: on the GPU)")
    ns = p.parse_args()
    if ns.jobs < 1:
        p.error(f"--jobs must be at least 1, not {ns.jobs}")
    if ns.compiles < 1:
        p.error(f"--compiles must be at least 1, not {ns.compiles}")
    return Args(ns.quick, ns.scale, ns.workloads,
                ns.search_s or (5.0 if ns.quick else 30.0), ns.train_s or (20.0 if ns.quick else 420.0),
                ns.rounds or (20 if ns.quick else 40), ns.compiles, list(dict.fromkeys(ns.seed)),
                ns.jobs, ns.out, ns.shaping, ns.shaping_final, ns.backend)


def agent_config(args: Args, seed: int) -> PPOConfig:
    """The RL agent's configuration: ``seed`` and the shaping schedule from the command line."""
    return PPOConfig(seed=seed, shaping=args.shaping, shaping_final=args.shaping_final)


@dataclass(frozen=True)
class Search:
    """One method run on one workload, for one seed's report."""

    seed: int
    workload: str
    method: str


def run_search(search: Search, args: Args, save: str | None) -> Outcome:
    """``search.method`` on its workload within its budget; an RL agent is saved to ``save``."""
    graph = build(search.workload, scale=args.scale)
    options = {}
    budget = args.search_s
    if search.method == "rl":
        options = {"progress": False, "save": save, "config": agent_config(args, search.seed)}
        budget = args.train_s
    return optimize(graph, search.method, budget, load_rules(), **options)


def run_job(job: tuple[Search, Args, str | None]) -> tuple[Search, Outcome]:
    """:func:`run_search` on one ``(search, args, save)``, returning the search with its outcome."""
    return job[0], run_search(*job)


def run_searches(args: Args, agent_path: Callable[[int], str]) -> dict[Search, Outcome]:
    """Every method on every workload for every seed: one at a time, or ``args.jobs`` at once
    (longest first); Fig. 7's RL agent of each seed is saved to ``agent_path(seed)``."""
    searches = [Search(seed, w, m) for seed in args.seeds for w in args.workloads for m in METHODS]
    searches.sort(key=lambda s: s.method != "rl")
    saves = {s: agent_path(s.seed) if s.method == "rl" and s.workload == FIG7 else None
             for s in searches}
    bar = dict(desc="searches", unit="search", total=len(searches))
    if args.jobs == 1:
        return {s: run_search(s, args, saves[s]) for s in tqdm(searches, **bar)}
    with pinned_pool(min(args.jobs, len(searches)), args.backend) as pool:
        jobs = [(s, args, saves[s]) for s in searches]
        return dict(tqdm(pool.imap_unordered(run_job, jobs), **bar))


def time_workload(name: str, args: Args, outcomes: dict[str, Outcome]) -> dict:
    """Every method's result on one workload (``outcomes``, by method), timed interleaved."""
    graph = build(name, scale=args.scale)
    results, graphs, stages = {}, {"input": graph}, {}
    for method in METHODS:
        out = outcomes[method]
        assert same_outputs(graph, out.graph), f"{method} changed {name}'s outputs"
        graphs[method] = out.graph
        results[method] = {"optimise_s": out.optimise_s, "applied": out.applied,
                           "kept_input": out.kept_input, "origin": out.origin,
                           "reason": out.reason, "rejected": out.rejected,
                           "training_episodes": out.episodes}
        if method == "rl":          # the agent's graph before polishing, to time the polish's effect
            stages = {f"rl {stage}": g for stage, g in out.stages.items() if same_outputs(graph, g)}
        if out.refused is not None:  # refused by the never-slower check: to compare the searches
            graphs[f"{method} searched"] = out.refused
    graphs.update(stages)
    graphs["greedy again"] = graphs["greedy"]      # an A/A control: one graph timed under two names
    latency = time_interleaved(graphs, rounds=args.rounds, compiles=args.compiles)
    for method in METHODS:
        results[method]["latency_ms"] = latency[method].median_ms
        results[method]["iqr_ms"] = latency[method].iqr_ms
        results[method]["speedup"] = latency["input"].median_ms / latency[method].median_ms
    best = min(BASELINES, key=lambda m: latency[m].median_ms)
    searched = {m: f"{m} searched" if f"{m} searched" in graphs else m for m in METHODS}
    best_search = min(BASELINES, key=lambda m: latency[searched[m]].median_ms)
    return {"input_ms": latency["input"].median_ms, "input_iqr_ms": latency["input"].iqr_ms,
            "nodes": len(graph.topo()), "methods": results,
            "rl_vs_best": {"baseline": best, **comparison(graphs, latency, best, "rl", args)},
            "search_vs_search": {"baseline": best_search, **comparison(
                graphs, latency, searched[best_search], searched["rl"], args)},
            "rl_vs_taso": {"baseline": "taso", **comparison(graphs, latency, "taso", "rl", args)},
            "rl_vs_stages": {stage: comparison(graphs, latency, stage, "rl", args)
                             for stage in stages},
            "control": control(latency, args),
            "round_medians_ms": {k: round_medians(v, args.rounds).tolist() for k, v in latency.items()},
            "round_ratios": {"rl_vs_best": round_ratios(latency[best], latency["rl"], args.rounds).tolist(),
                             "control": round_ratios(latency["greedy"], latency["greedy again"],
                                                     args.rounds).tolist()}}


def control(latency: dict, args: Args) -> dict:
    """The verdict on greedy's graph against itself timed under another name: how often the rule
    calls a win or a loss where there is none."""
    return verdict_entry(paired_verdict(latency["greedy"], latency["greedy again"], args.rounds,
                                        args.compiles), False)


def comparison(graphs: dict, latency: dict, reference: str, challenger: str, args: Args) -> dict:
    """The paired verdict of ``challenger`` against ``reference``, per compile pair (a tie,
    untimed, for the same graph: hash-consed graphs are structurally identical exactly when
    their keys are equal)."""
    same = graphs[challenger].key() == graphs[reference].key()
    return verdict_entry(paired_verdict(latency[reference], latency[challenger], args.rounds,
                                        args.compiles), same)


def verdict_entry(v, same: bool) -> dict:
    """A verdict as the JSON records it (a tie, whatever was timed, for the same graph)."""
    return {**v.record(), "same_graph": same, "verdict": "tie" if same else v.outcome}


def generalisation(args: Args, rules, path: str, seed: int) -> list[dict]:
    """Fig. 7: the agent trained on FIG7's default shape (saved at ``path``; trained here with
    ``seed`` if the file is missing), evaluated on three other shapes."""
    if not os.path.exists(path):
        optimize_with_agent(build(FIG7, scale=args.scale), rules, args.train_s, save=path,
                            config=agent_config(args, seed), progress=False)
    rows = []
    for shape in WORKLOADS[FIG7].shapes[args.scale]:
        g = build(FIG7, scale=args.scale, **shape)
        res = optimize_with_agent(g, rules, 2.0, load=path)
        lat = time_interleaved({"input": g, "agent": res.graph}, rounds=6)
        rows.append({"shape": shape, "speedup": lat["input"].median_ms / lat["agent"].median_ms,
                     "applied": len(res.applied)})
    return rows


def heatmap(report: dict, path: str) -> None:
    """Fig. 5: how often the RL agent applied each rule, per workload (rules applied at least once)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["workloads"])
    counts: dict[str, dict[str, int]] = {}
    for w in names:
        for rule in report["workloads"][w]["methods"]["rl"]["applied"]:
            counts.setdefault(rule, {}).setdefault(w, 0)
            counts[rule][w] += 1
    rules = sorted(counts)
    grid = np.array([[counts[r].get(w, 0) for r in rules] for w in names]) if rules else np.zeros((len(names), 1))
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(rules) + 2), 0.5 * len(names) + 2))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(rules)), rules, rotation=70, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)), names)
    for (i, j), v in np.ndenumerate(grid):
        if v:
            ax.text(j, i, str(v), ha="center", va="center", color="w", fontsize=7)
    fig.colorbar(im, ax=ax, label="applications")
    ax.set_title("Rewrite rules applied by the RL agent")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    write_bytes_atomic(path, buffer.getvalue())
    plt.close(fig)


def cell(cmp: dict) -> str:
    """A comparison as two table cells, ``ratio [low, high] | verdict``."""
    return (f"{cmp['ratio']:.3f} [{cmp['ci95'][0]:.3f}, {cmp['ci95'][1]:.3f}] | {cmp['verdict']}"
            + (" (same graph)" if cmp["same_graph"] else ""))


def table(report: dict) -> str:
    """Speed-ups (IQR as % of the median), RL vs the best baseline with its verdict, and times."""
    stages = sorted({s for r in report["workloads"].values() for s in r.get("rl_vs_stages", {})})
    head = ("| workload | nodes | input ms (IQR %) | "
            + " | ".join(f"{m} x (IQR %)" for m in METHODS)
            + " | best baseline | best / rl [95% CI] | verdict | "
            + "best search | its / rl's search [95% CI] | search verdict | "
            + "taso / rl [95% CI] | taso verdict | "
            + "".join(f"{s} / rl [95% CI] | {s} verdict | " for s in stages)
            + "A/A control [95% CI] | A/A verdict | "
            + " | ".join(f"{m} s" for m in METHODS) + " |")
    lines = [head, "|" + "---|" * (13 + 2 * len(stages) + 2 * len(METHODS))]
    for w, r in report["workloads"].items():
        ms = r["methods"]
        noise = {m: 100 * ms[m]["iqr_ms"] / ms[m]["latency_ms"] for m in METHODS}
        lines.append(f"| {w} | {r['nodes']} | {r['input_ms']:.3f} "
                     f"({100 * r['input_iqr_ms'] / r['input_ms']:.0f}) | "
                     + " | ".join(f"{ms[m]['speedup']:.3f} ({noise[m]:.0f})" for m in METHODS)
                     + f" | {r['rl_vs_best']['baseline']} | {cell(r['rl_vs_best'])} | "
                     + (f"{r['search_vs_search']['baseline']} | {cell(r['search_vs_search'])} | "
                        if "search_vs_search" in r else "- | - | - | ")
                     + (f"{cell(r['rl_vs_taso'])} | " if "rl_vs_taso" in r else "- | - | ")
                     + "".join(f"{cell(r['rl_vs_stages'][s]) if s in r.get('rl_vs_stages', {}) else '- | -'}"
                               " | " for s in stages)
                     + (f"{cell(r['control'])} | " if "control" in r else "- | - | ")
                     + " | ".join(f"{ms[m]['optimise_s']:.1f}" for m in METHODS) + " |")
    lines.append("")
    for label, key in (("RL vs best baseline", "rl_vs_best"),
                       ("RL's search vs the best baseline search (before the never-slower check)",
                        "search_vs_search"),
                       ("RL vs TASO's sum (X-RLflow's comparison)", "rl_vs_taso")):
        verdicts = [r[key]["verdict"] for r in report["workloads"].values() if key in r]
        lines.append(f"{label}: {verdicts.count('win')} win, {verdicts.count('tie')} tie, "
                     f"{verdicts.count('loss')} loss")
    lines.append("")
    lines.append("| Fig. 7 (bert agent, other shapes) | speed-up | rewrites |")
    lines.append("|---|---|---|")
    for row in report["generalisation"]:
        lines.append(f"| {row['shape']} | {row['speedup']:.3f} | {row['applied']} |")
    return "\n".join(lines)


def device_name(backend: str) -> str:
    """Where the graphs ran, in words."""
    if backend == "torch-cuda":
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return f"cpu, {backend}, 1 thread"


def report_path(out: str, seed: int, several: bool) -> str:
    """Where one seed's report goes: ``out`` itself, or with ``_sSEED`` before its extension."""
    root, ext = os.path.splitext(out)
    return f"{root}_s{seed}{ext}" if several else out


def main() -> int:
    args = parse_args()
    if args.jobs > 1 and args.backend == "torch-cuda":
        print("warning: --jobs > 1 runs the searches side by side on one GPU, where each measures "
              "the others' kernels too; on an H100, with 16 jobs, the agent lost 8 of 12 "
              "comparisons with the best baseline",
              file=sys.stderr)
    set_default_backend(args.backend)
    torch.set_num_threads(1)
    rules = load_rules()
    start = time.perf_counter()
    tmp = tempfile.TemporaryDirectory()

    def agent_path(seed: int) -> str:
        return os.path.join(tmp.name, f"agent_s{seed}.pt")

    one_core = {min(os.sched_getaffinity(0))}
    if args.jobs == 1:          # searches and timing on one core, as each worker of the pool
        os.sched_setaffinity(0, one_core)
    outcomes = run_searches(args, agent_path)
    searched_s = time.perf_counter() - start
    os.sched_setaffinity(0, one_core)       # the timing, alone, on one core (not migrating)
    for seed in args.seeds:
        report = {"quick": args.quick, "scale": args.scale, "budgets_s": {
            "search": args.search_s, "rl": args.train_s}, "rounds": args.rounds,
            "compiles": args.compiles, "seed": seed,
            "jobs": args.jobs, "shaping": [args.shaping, args.shaping_final],
            "device": device_name(args.backend), "workloads": {}}
        for name in tqdm(args.workloads, desc=f"timing seed {seed}", unit="workload"):
            r = report["workloads"][name] = time_workload(
                name, args, {m: outcomes[Search(seed, name, m)] for m in METHODS})
            tqdm.write(f"{name}: " + ", ".join(f"{m} x{r['methods'][m]['speedup']:.3f}" for m in METHODS)
                       + f"; rl vs {r['rl_vs_best']['baseline']}: {r['rl_vs_best']['verdict']}",
                       file=sys.stderr)
        print(f"[{time.perf_counter() - start:6.1f}s] generalisation", file=sys.stderr)
        report["generalisation"] = generalisation(args, rules, agent_path(seed), seed)
        report["searches_s"] = searched_s
        report["seconds"] = time.perf_counter() - start
        out = report_path(args.out, seed, len(args.seeds) > 1)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        write_bytes_atomic(out, json.dumps(report, indent=1).encode())
        heatmap(report, os.path.splitext(out)[0] + "_rules.png")
        print(f"seed {seed}\n" + table(report))
        print(f"\n{report['seconds']:.0f} s; JSON: {out}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
