"""GMI-DRL on this machine: correctness, throughput, and communication time vs Table 2.

Four parts, each printed as a table and written to ``benchmarks/results/gmi.json``:

1. correctness: every reduction strategy on several layouts (uneven ones
   included) against a float64 single-process sum, and N data-parallel PPO
   instances against one process over the union of their data;
2. throughput: sync PPO and async A3C with Algorithm 2's choice of instances
   per device and environments per instance, against one process per device;
3. communication: measured time per strategy next to Table 2's cost
   expressions, with B1 (host shared memory between instances) and B2 (gloo
   ring) calibrated on two-instance runs;
4. a Tempo program as the instances' program: REINFORCE on tensor CartPole,
   one process against two data-parallel replicas splitting its episodes.

    .venv/bin/python benchmarks/gmi.py [--quick] [--out benchmarks/results/gmi.json]

Instances get the manager's automatic shares: CPU core sets on a machine
without an NVIDIA GPU, MPS thread shares on GPUs; the tables and the JSON name
the device.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from tempo.gmi import checkpoint
from tempo.gmi.atomic import write_json
from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.ppo import PPOConfig, train_reference
from tempo.gmi.reduce_run import TOLERANCE, bench_reduce, runnable_strategies
from tempo.gmi.resources import probe_gpus
from tempo.gmi.search import algorithm2, measured_profile
from tempo.gmi.strategy import select_strategy, table2_cost
from tempo.gmi.table import format_table
from tempo.gmi.train_run import TrainJob, train


@dataclass
class Args:
    quick: bool = False
    """small sizes and short runs (about 4 minutes on 2 cores)"""
    out: str = "benchmarks/results/gmi.json"
    """where the JSON results go"""

    @property
    def layouts(self) -> list[str]:
        """Reduction layouts: uniform, uneven, crowded."""
        return ["2x2", "2,1", "1x3"] if self.quick else ["2x2", "2,1", "1x3", "3,2,2", "3x2", "2x1"]

    @property
    def size_mb(self) -> float:
        return 2.0 if self.quick else 16.0

    @property
    def train_seconds(self) -> float:
        return 6.0 if self.quick else 20.0

    @property
    def envs(self) -> list[str]:
        return ["CartPole-v1"] if self.quick else ["CartPole-v1", "Acrobot-v1"]


def device() -> str:
    """The device the instances share: this machine's NVIDIA GPUs, or its CPU cores."""
    gpus = probe_gpus()
    if gpus:
        return f"{len(gpus)} NVIDIA GPU(s), " + ", ".join(f"sm_{g.compute_capability}" for g in gpus)
    return f"cpu, {os.cpu_count()} cores"


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=Args.quick.__doc__)
    parser.add_argument("--out", default=Args.out)
    return Args(**vars(parser.parse_args()))


# ---------------------------------------------------------------- correctness + communication
def reductions(args: Args, bar: tqdm) -> list[dict]:
    """Every runnable strategy on every layout: error and time."""
    rows = []
    for text in args.layouts:
        layout = Layout.parse(text)
        strategies, _ = runnable_strategies("all", layout)
        for row in bench_reduce(layout, strategies, args.size_mb, repeats=3):
            rows.append({"layout": text, "chosen": select_strategy(layout.mpl) == row["strategy"],
                         **row})
        bar.update()
    return rows


def ppo_equivalence(args: Args, bar: tqdm) -> list[dict]:
    """N PPO instances vs one process over the union of their data."""
    torch.set_num_threads(1)
    cfg = PPOConfig(num_envs=4, num_steps=16, hidden=(64, 64), seed=1)
    rows = []
    for text, strategy in [("2,1", "har")] + ([] if args.quick else [("2x2", "mrr"), ("1x3", "mpr")]):
        layout = Layout.parse(text)
        program = Program("ppo", ("simulator", "agent", "trainer"),
                          {"config": asdict(cfg), "strategy": strategy, "iterations": 3})
        manager = GMIManager(layout, [program] * layout.world_size)
        manager.run()
        state = checkpoint.load(manager.run_dir)["policy"]
        got = torch.cat([v.reshape(-1) for v in state.values()])
        union = train_reference(cfg, layout.world_size, 3)
        error = ((got - union).abs().max() / union.abs().max()).item()
        rows.append({"layout": text, "strategy": strategy, "iterations": 3,
                     "max_rel_error": error, "ok": "yes" if error <= TOLERANCE else "NO"})
        bar.update()
    return rows


def bandwidths(size_mb: float) -> tuple[float, float]:
    """B1 and B2 calibrated on two instances, where Table 2 reduces to M / B:
    B1 from MPR on one device (1x2), B2 from the gloo ring on two devices (2x1)."""
    host = bench_reduce(Layout.parse("1x2"), ["mpr"], size_mb, repeats=3)[0]
    ring = bench_reduce(Layout.parse("2x1"), ["mrr"], size_mb, repeats=3)[0]
    size = host["size_mb"] * 2**20
    return size / host["seconds"], size / ring["seconds"]


def table2_rows(reduce_rows: list[dict], b1: float, b2: float) -> list[dict]:
    rows = []
    for row in reduce_rows:
        layout = Layout.parse(row["layout"])
        g, t = layout.num_devices, max(layout.per_device)
        model = table2_cost(row["strategy"], g, t, row["size_mb"] * 2**20, b1, b2)
        rows.append({"layout": row["layout"], "strategy": row["strategy"],
                     "measured_ms": row["time_ms"], "table2_ms": model * 1e3,
                     "ratio": row["time_ms"] / (model * 1e3) if model > 0 else None})
    return rows


# ---------------------------------------------------------------- throughput
def throughput(args: Args, bar: tqdm) -> tuple[list[dict], list[dict]]:
    """Algorithm 2's choice vs one process per device, for sync PPO and async A3C."""
    rows, searches = [], []
    counts, env_counts = ([2, 1], [8, 32]) if args.quick else ([4, 2, 1], [8, 32, 128])
    for env_id in args.envs:
        def profile(instances: int, num_envs: int, _profile=measured_profile(env_id, 2.0)):
            bar.update()
            return _profile(instances, num_envs)

        best, points = algorithm2(profile, counts, env_counts, num_devices=1)
        searches += [{"env": env_id, **asdict(p)} for p in points]
        single = max((p for p in points if p.instances == 1 and p.runnable), key=lambda p: p.top)
        # (label, layout for ppo, layout for a3c, envs per instance, thread cap)
        configs = [("one process per device", (1,), (1, 1), single.num_envs, None),
                   ("one process per device, 1 thread", (1,), (1, 1), single.num_envs, 1),
                   ("GMI (Algorithm 2)", (best.instances,), (best.instances, 1), best.num_envs, None)]
        for algo, index in (("ppo", 1), ("a3c", 2)):
            for config in configs:
                layout = Layout(config[index])
                summary = train(TrainJob(layout, algo, seconds=args.train_seconds,
                                         config=PPOConfig(env_id=env_id, num_envs=config[3]),
                                         max_threads=config[4]), echo=lambda line: None)
                rows.append(_throughput_row(algo, env_id, config[0], layout, config[3], summary))
                bar.update()
    return rows, searches


def tempo_programs(args: Args, bar: tqdm, run_root: str) -> list[dict]:
    """Tempo-compiled REINFORCE on tensor CartPole: one process, or two replicas on the same cores.

    Both train on the same episodes per iteration (the replicas split them).
    """
    rows = []
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                           "reinforce.py")
    batch, steps, iterations = 32, 200, (10 if args.quick else 30)
    for layout_text in ("1x1", "1x2"):
        layout = Layout.parse(layout_text)
        run_dir = os.path.join(run_root, f"tempo-{layout_text}")
        summary = train(TrainJob(layout, "tempo", program=program, run_dir=run_dir,
                                 program_args={"impl": "tensor", "iterations": iterations,
                                               "batch": batch // layout.world_size,
                                               "steps": steps}), echo=lambda line: None)
        first = json.load(open(os.path.join(run_dir, "instance-0.json")))
        rows.append({"layout": layout_text, "episodes_per_iteration": batch,
                     "iterations": iterations, "wall_s": first["seconds"],
                     "s_per_iteration": first["seconds_per_iteration"],
                     "steady_steps_per_s": batch * steps / first["seconds_per_iteration"],
                     "mean_return": first["mean_return"], "comm_fraction": summary["comm_fraction"]})
        bar.update()
    return rows


def _throughput_row(algo, env_id, label, layout, num_envs, summary) -> dict:
    return {"algo": algo, "env": env_id, "config": label, "layout": str(layout),
            "num_envs": num_envs, "steps_per_s": summary["steps_per_second"],
            "trained_per_s": (summary["trained_samples"] / summary["seconds"]
                              if algo == "a3c" and summary["seconds"] else None),
            "mean_return": summary["mean_return"]}


# ---------------------------------------------------------------- report
def main() -> None:
    args = parse_args()
    steps = len(args.layouts) + 1 + (1 if args.quick else 3) + len(args.envs) * (
        (4 if args.quick else 9) + 6) + 2
    with tqdm(total=steps, desc="gmi benchmark", unit="run") as bar:
        reduce_rows = reductions(args, bar)
        b1, b2 = bandwidths(args.size_mb)
        bar.update()
        ppo_rows = ppo_equivalence(args, bar)
        throughput_rows, search_rows = throughput(args, bar)
        with tempfile.TemporaryDirectory(prefix="tempo-gmi-bench-") as run_root:
            tempo_rows = tempo_programs(args, bar, run_root)
    comm_rows = table2_rows(reduce_rows, b1, b2)
    print("\nReduction correctness and time (max rel err vs float64 single-process sum):")
    print(format_table(reduce_rows, [("layout", "layout", "s"), ("strategy", "strategy", "s"),
                                     ("size_mb", "MB", ".1f"), ("time_ms", "time ms", ".2f"),
                                     ("busbw", "busbw GB/s", ".3f"),
                                     ("max_rel_error", "max rel err", ".1e"), ("ok", "ok", "s")]))
    print("\nData-parallel PPO vs one process over the union of the data (parameters):")
    print(format_table(ppo_rows, [("layout", "layout", "s"), ("strategy", "strategy", "s"),
                                  ("iterations", "iters", "d"),
                                  ("max_rel_error", "max rel err", ".1e"), ("ok", "ok", "s")]))
    print(f"\nCommunication vs Table 2 (B1 = {b1 / 1e9:.3f} GB/s host shared memory, "
          f"B2 = {b2 / 1e9:.3f} GB/s gloo ring; t = most instances on a device):")
    print(format_table(comm_rows, [("layout", "layout", "s"), ("strategy", "strategy", "s"),
                                   ("measured_ms", "measured ms", ".2f"),
                                   ("table2_ms", "Table 2 ms", ".2f"), ("ratio", "ratio", ".2f")]))
    print("\nAlgorithm 2 profile points (one device = this machine's cores):")
    print(format_table(search_rows, [("env", "env", "s"), ("instances", "GMIs", "d"),
                                     ("num_envs", "envs", "d"), ("top", "steps/s/GMI", ".0f"),
                                     ("mem_mb", "MB", ".0f"), ("sat", "Sat", ".3f"),
                                     ("projected", "projected", ".0f"), ("note", "note", "s")]))
    print(f"\nThroughput ({device()}):")
    print(format_table(throughput_rows, [("algo", "algo", "s"), ("env", "env", "s"),
                                         ("config", "config", "s"), ("layout", "layout", "s"),
                                         ("num_envs", "envs", "d"),
                                         ("steps_per_s", "steps/s", ".0f"),
                                         ("trained_per_s", "trained/s", ".0f"),
                                         ("mean_return", "mean return", ".1f")]))
    print("\nTempo-compiled REINFORCE on tensor CartPole (T=200) as the instances' program "
          "(s/iteration: median, compilation excluded; wall: the whole run):")
    print(format_table(tempo_rows, [("layout", "layout", "s"),
                                    ("episodes_per_iteration", "episodes/it", "d"),
                                    ("iterations", "iters", "d"), ("wall_s", "wall s", ".1f"),
                                    ("s_per_iteration", "s/it", ".3f"),
                                    ("steady_steps_per_s", "steps/s", ".0f"),
                                    ("comm_fraction", "comm", ".3f"),
                                    ("mean_return", "mean return", ".1f")]))
    write_json(args.out, {"quick": args.quick, "device": device(),
                          "b1_bytes_per_s": b1, "b2_bytes_per_s": b2,
                          "reductions": reduce_rows, "ppo_equivalence": ppo_rows,
                          "communication": comm_rows, "search": search_rows,
                          "throughput": throughput_rows, "tempo_program": tempo_rows})
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
