"""Benchmark of the memory-mapping agents on instances from XLA-compiled JAX trainers.

Prints Table 2 (final reward of MMap-MuZero, evolutionary search and random
play under the same time budget; ES as in §5.1, over the actions, and ES over
a linear policy of action features, a stronger baseline than the paper's) and
Table 3 (modelled latency speed-up of MMap-MuZero and of MMap-MuZero-prod over
the heuristic), writes ``benchmarks/results/memplan.json`` (or ``--out``),
reward curves like Fig. 5, the ablation curves of Fig. 7 and a memory-layout
picture like Fig. 8 (PNGs next to the JSON, named after it).

    python benchmarks/memplan.py --quick     # short budgets (a few minutes)
    python benchmarks/memplan.py             # 60 s per agent and instance
    python benchmarks/memplan.py --demo-ablation   # + MuZero with demonstrations flipped
    python benchmarks/memplan.py --muzero lookahead=False   # MuZeroConfig overrides

Modelled latency is ``hbm_latency - reward`` (the cost model's latency with
every buffer in slow memory, minus the latency the placed buffers save);
MMap-MuZero-prod is the better of the heuristic's and MMap-MuZero's solutions
from the same run. The ablation (and, with ``--demo-ablation``, every
instance) also runs MMap-MuZero with its ``demonstrations`` switch flipped.
Extracted instances are cached under the results folder.
Before timing, each JAX agent (MMap-MuZero and its no-search ablation) plays
one discarded 5 s run on the smallest instance, so the one-off JIT compilation
(seconds on a CPU) is not charged to the first instance's budget.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from functools import partial

from tqdm import tqdm

from tempo.memplan.agents import get_agent
from tempo.memplan.agents.muzero import parsed_config
from tempo.memplan.extract import extract_instance
from tempo.memplan.problem import instance_to_json, load_instance, solution_to_json, write_json_atomic
from tempo.memplan.validate import validate

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
INSTANCES = [("mlp", 2), ("convnet", 4), ("transformer", 1), ("mlp", 8), ("transformer", 4),
             ("mlp", 24), ("convnet", 8), ("transformer", 12), ("mlp", 64),
             ("transformer", 24), ("mlp", 176), ("transformer", 52)]
AGENTS = ("muzero", "es", "es-linear", "random")
WARM_UP_SECONDS = 5.0   # one discarded run per JAX agent: compiles its functions outside the budgets


@dataclass
class Args:
    """Benchmark settings."""

    quick: bool = False        # short budgets
    budget: float = 60.0       # seconds per agent and instance (quick: 4)
    seed: int = 0
    ablation_budget: float = 60.0   # seconds per ablation agent (quick: 8)
    instances: tuple[str, ...] = ()  # names of the instances run (empty: all)
    demo_ablation: bool = False      # also run MuZero with demonstrations flipped on every instance
    out: str = os.path.join(RESULTS, "memplan.json")   # the JSON; pictures are named after it
    muzero: tuple[str, ...] = ()     # MuZeroConfig FIELD=VALUE overrides for every MuZero run


def _instance(program: str, scale: int):
    path = os.path.join(RESULTS, "memplan_instances", f"{program}{scale}.json")
    if os.path.exists(path):
        return load_instance(path)
    inst = extract_instance(program, scale)
    write_json_atomic(path, instance_to_json(inst))
    return inst


def _muzero_solvers(config) -> tuple[object, str, object]:
    """MMap-MuZero's ``solve`` with ``config``, and the name and ``solve`` of the same agent
    with its ``demonstrations`` switch flipped."""
    from tempo.memplan.agents import muzero

    on = not config.demonstrations
    flipped = replace(config, demonstrations=on)
    return (partial(muzero.solve, config=config), f"muzero-demos-{'on' if on else 'off'}",
            partial(muzero.solve, config=flipped))


def _run(agent: str, inst, budget: float, seed: int, solve=None) -> dict:
    start = time.perf_counter()
    result = (solve or get_agent(agent))(inst, budget, seed)
    validate(inst, result.solution)
    return {"reward": result.solution.reward, "curve": result.curve, "games": result.games,
            "episodes": result.episodes, "seconds": time.perf_counter() - start,
            "solution": result.solution}


def _speedups(rows: list[dict], agent: str) -> dict:
    values = [r["speedup"][agent] for r in rows]
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values),
            "improved": sum(v > 1 + 1e-9 for v in values), "total": len(values)}


def _plots(rows: list[dict], ablation: dict, layout: tuple, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    paths = []
    picks = [rows[i] for i in sorted({0, len(rows) // 3, 2 * len(rows) // 3, len(rows) - 1})]
    fig, axes = plt.subplots(1, len(picks), figsize=(4 * len(picks), 3.2), squeeze=False)
    axes = axes[0]
    for ax, row in zip(axes, picks):
        for agent in AGENTS:
            curve = row["curves"][agent]
            if curve:
                xs, ys = zip(*curve)
                ax.step(list(xs) + [row["budget"]], list(ys) + [ys[-1]], where="post", label=agent)
        ax.axhline(row["reward"]["heuristic"], color="k", ls=":", label="heuristic")
        ax.set_title(f"{row['name']} ({row['buffers']} buffers)")
        ax.set_xlabel("seconds")
    axes[0].set_ylabel("best reward (us saved)")
    axes[0].legend()
    fig.tight_layout()
    paths.append(f"{prefix}_reward_curves.png")
    fig.savefig(paths[-1], dpi=110)

    big = [r for r in rows if r["buffers"] > 1000] or rows[-1:]
    fig, axes = plt.subplots(1, len(big), figsize=(4 * len(big), 3.2), squeeze=False)
    for ax, row in zip(axes[0], big):
        for agent in AGENTS:
            if row["games"][agent]:
                xs, ys = zip(*row["games"][agent])
                ax.plot(xs, ys, ".", ms=3, alpha=0.6, label=agent)
        ax.axhline(row["reward"]["heuristic"], color="k", ls=":", label="heuristic")
        ax.set_title(f"{row['name']} ({row['buffers']} buffers)")
        ax.set_xlabel("seconds")
    axes[0][0].set_ylabel("return of each game (us saved)")
    axes[0][0].legend()
    fig.tight_layout()
    paths.append(f"{prefix}_learning_curves.png")
    fig.savefig(paths[-1], dpi=110)

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for agent, curve in ablation["curves"].items():
        if curve:
            xs, ys = zip(*curve)
            ax.step(list(xs) + [ablation["budget"]], list(ys) + [ys[-1]], where="post", label=agent)
    ax.set_title(f"ablation on {ablation['name']}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("best reward")
    ax.legend()
    fig.tight_layout()
    paths.append(f"{prefix}_ablation.png")
    fig.savefig(paths[-1], dpi=110)

    inst, solutions = layout
    fig, axes = plt.subplots(1, len(solutions), figsize=(6 * len(solutions), 4), sharey=True,
                             squeeze=False)
    axes = axes[0]
    cmap = plt.get_cmap("tab20")
    for ax, (label, sol) in zip(axes, solutions.items()):
        for b, d in zip(inst.buffers, sol.decisions):
            if d.interval is not None:
                ax.add_patch(Rectangle((d.interval[0], d.offset), d.interval[1] - d.interval[0] + 1,
                                       b.size, facecolor=cmap(b.tensor_id % 20), edgecolor="k",
                                       linewidth=0.2))
        ax.set_xlim(0, inst.num_steps)
        ax.set_ylim(0, inst.capacity)
        ax.set_title(f"{label}: reward {sol.reward:.1f}")
        ax.set_xlabel("logical time")
    axes[0].set_ylabel("fast-memory offset (bytes)")
    fig.tight_layout()
    paths.append(f"{prefix}_layout.png")
    fig.savefig(paths[-1], dpi=110)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--instances", nargs="+", metavar="NAME",
                        help="run only these instances (e.g. transformer12 mlp64)")
    parser.add_argument("--demo-ablation", action="store_true",
                        help="also run MuZero with its demonstrations switch flipped on every instance")
    parser.add_argument("--out", default=Args.out, help="the JSON written (pictures next to it)")
    parser.add_argument("--muzero", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="MuZeroConfig overrides for every MuZero run (e.g. memory_price=1.0)")
    ns = parser.parse_args()
    names = [f"{p}{s}" for p, s in INSTANCES]
    unknown = sorted(set(ns.instances or ()) - set(names))
    if unknown:
        parser.error(f"unknown instance(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    chosen = [(p, s) for p, s in INSTANCES if not ns.instances or f"{p}{s}" in ns.instances]
    args = Args(quick=ns.quick, seed=ns.seed,
                budget=ns.budget or (4.0 if ns.quick else 60.0),
                ablation_budget=8.0 if ns.quick else 60.0, instances=tuple(ns.instances or ()),
                demo_ablation=ns.demo_ablation, out=ns.out, muzero=tuple(ns.muzero))
    os.makedirs(RESULTS, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows, keep = [], {}
    muzero_solve, flipped, flipped_solve = _muzero_solvers(parsed_config(parser, list(args.muzero)))
    solvers = {"muzero": muzero_solve, flipped: flipped_solve}
    warm = _instance(*INSTANCES[0])
    for agent in tqdm(("muzero", "nosearch"), desc="JIT warm-up"):
        (solvers.get(agent) or get_agent(agent))(warm, WARM_UP_SECONDS, args.seed)
    for program, scale in tqdm(chosen, desc="instances"):
        inst = _instance(program, scale)
        runs = {"heuristic": _run("heuristic", inst, 1.0, args.seed)}
        for agent in AGENTS:
            runs[agent] = _run(agent, inst, args.budget, args.seed, solvers.get(agent))
        if args.demo_ablation:
            runs[flipped] = _run(flipped, inst, args.budget, args.seed, flipped_solve)
        best = max(("heuristic", "muzero"), key=lambda a: runs[a]["reward"])
        runs["hybrid"] = dict(runs[best])
        latency = {a: inst.hbm_latency - r["reward"] for a, r in runs.items()}
        rows.append({
            "name": inst.name, "buffers": len(inst.buffers), "steps": inst.num_steps,
            "budget": args.budget, "hbm_latency": inst.hbm_latency,
            "reward": {a: r["reward"] for a, r in runs.items()},
            "episodes": {a: r["episodes"] for a, r in runs.items()},
            "seconds": {a: r["seconds"] for a, r in runs.items() if a != "hybrid"},
            "latency": latency,
            "speedup": {a: latency["heuristic"] / latency[a] for a in runs},
            "curves": {a: runs[a]["curve"] for a in AGENTS},
            "games": {a: runs[a]["games"] for a in AGENTS}})
        keep[inst.name] = (inst, runs)

    small = rows[0]["name"]
    inst = keep[small][0]
    ablation = {"name": small, "budget": args.ablation_budget, "curves": {}, "reward": {}}
    for agent in tqdm(("muzero", flipped, "mcts", "nosearch"), desc="ablation"):
        run = _run(agent, inst, args.ablation_budget, args.seed, solvers.get(agent))
        ablation["curves"][agent] = run["curve"]
        ablation["reward"][agent] = run["reward"]

    layout_name = rows[min(1, len(rows) - 1)]["name"]
    layout_inst, layout_runs = keep[layout_name]
    layout = (layout_inst, {"MMap-MuZero": layout_runs["muzero"]["solution"],
                            "heuristic": layout_runs["heuristic"]["solution"]})
    pictures = _plots(rows, ablation, layout, os.path.splitext(args.out)[0])
    tables = {a: _speedups(rows, a) for a in ("muzero", "hybrid", "es", "es-linear")}
    write_json_atomic(args.out, {
        "args": asdict(args), "instances": rows, "table3": tables, "ablation": ablation,
        "pictures": pictures,
        "layout_solutions": {k: solution_to_json(v) for k, v in layout[1].items()}})

    print(f"\nTable 2: final reward (us of modelled latency saved), {args.budget:g} s per agent")
    print("| instance | buffers | heuristic | MMap-MuZero | ES (§5.1) | ES-linear | random | "
          "MuZero > ES | MuZero > ES-linear | games MuZero / ES / ES-linear |")
    print("|---|---:|---:|---:|---:|---:|---:|:-:|:-:|---:|")
    for r in rows:
        rw, ep = r["reward"], r["episodes"]
        print(f"| {r['name']} | {r['buffers']} | {rw['heuristic']:.1f} | {rw['muzero']:.1f} | "
              f"{rw['es']:.1f} | {rw['es-linear']:.1f} | {rw['random']:.1f} | "
              f"{'yes' if rw['muzero'] > rw['es'] else 'no'} | "
              f"{'yes' if rw['muzero'] > rw['es-linear'] else 'no'} | "
              f"{ep['muzero']} / {ep['es']} / {ep['es-linear']} |")
    if args.demo_ablation:
        print(f"\nMuZero with its demonstrations switch flipped ({flipped}), same budget")
        print(f"| instance | MMap-MuZero | {flipped} | ES | games MuZero / {flipped} |")
        print("|---|---:|---:|---:|---:|")
        for r in rows:
            rw, ep = r["reward"], r["episodes"]
            print(f"| {r['name']} | {rw['muzero']:.1f} | {rw[flipped]:.1f} | {rw['es']:.1f} | "
                  f"{ep['muzero']} / {ep[flipped]} |")
    print("\nTable 3: modelled latency speed-up over the heuristic")
    print("| agent | mean | min | max | improved |")
    print("|---|---:|---:|---:|---:|")
    for agent, t in tables.items():
        label = {"muzero": "MMap-MuZero", "hybrid": "MMap-MuZero-prod", "es": "ES (§5.1)",
                 "es-linear": "ES-linear"}[agent]
        print(f"| {label} | {t['mean']:.4f} | {t['min']:.4f} | {t['max']:.4f} | "
              f"{t['improved']}/{t['total']} |")
    print("\nwall seconds per run (max over instances; budget %g s): " % args.budget + ", ".join(
        f"{a} {max(r['seconds'][a] for r in rows):.1f}" for a in AGENTS))
    print(f"\nAblation on {small} ({args.ablation_budget:g} s): " + ", ".join(
        f"{a} {v:.1f}" for a, v in ablation["reward"].items()))
    print("pictures: " + ", ".join(os.path.relpath(p) for p in pictures))
    print(json.dumps({"results": os.path.relpath(args.out)}))


if __name__ == "__main__":
    main()
