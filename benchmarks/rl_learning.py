"""Learning curves: Tempo's CleanRL-style PPO examples against a CleanRL-style PyTorch loop and Stable-Baselines3.

Each run trains one system on one environment with one seed, in a fresh
process at one thread (NumPy/BLAS, torch and XLA capped at 1), and records
every finished episode (global step, return, length, wall and CPU seconds
since the run started) and the process's wall and CPU seconds.

- ``tempo``: ``examples/ppo.py`` (discrete actions) or
  ``examples/ppo_continuous.py`` (Box actions), with ``--tempo-impl`` and
  ``--tempo-backend``;
- ``cleanrl``: ``benchmarks/baselines/cleanrl_rollout_ppo.py``, the same
  algorithm and hyper-parameters written as CleanRL writes it (torch eager,
  one thread);
- ``sb3``: ``benchmarks/baselines/sb3_ppo.py``, Stable-Baselines3's PPO (the
  ``bench`` extra) with the same hyper-parameters mapped onto its arguments
  (that file says how; it has no CleanRL-style clipped value loss).

Environments and their settings (CleanRL's ``ppo.py`` defaults for the
discrete ones, ``ppo_continuous_action.py``'s for the others); ``--scale``
multiplies every step budget for a reduced run:

    CartPole-v1 500k, Acrobot-v1 500k, Pendulum-v1 200k (4 envs x 512 steps),
    HalfCheetah-v5 and Hopper-v5 1M

It prints a table per run and writes ``<out>.json`` (every run, and per
environment and system: the final return, env steps and CPU seconds to a
target return, steps per second of wall and of CPU time, and whether Tempo's
mean curve lies within each baseline's seed spread at every 10% of the run)
and ``<out>.png`` (episodic return against environment steps and against
wall seconds, mean and min-max band over seeds).

Python's bytecode is cached as an install caches it, the same for every
system: every worker writes and reads its ``.pyc`` files under one temporary
``PYTHONPYCACHEPREFIX`` (``PYTHONDONTWRITEBYTECODE`` unset), and one short
untimed run of each system on each environment (one iteration) fills it
before the timed runs, so that no timed run compiles Python source.

    .venv/bin/python benchmarks/rl_learning.py                       # the full run
    .venv/bin/python benchmarks/rl_learning.py --envs CartPole-v1 --seeds 1 2 3
    .venv/bin/python benchmarks/rl_learning.py --envs CartPole-v1 --systems tempo sb3 --seeds 1 2
    .venv/bin/python benchmarks/rl_learning.py --envs CartPole-v1 --set num_envs=16 num_steps=256 --scale 0.2
    .venv/bin/python benchmarks/rl_learning.py --envs Acrobot-v1 Pendulum-v1 --scale 0.1
    .venv/bin/python benchmarks/rl_learning.py --envs HalfCheetah-v5 --systems tempo cleanrl --scale 0.3 \
        --set bootstrap_truncation=False        # CleanRL's own choice: truncation ends an episode
    .venv/bin/python benchmarks/rl_learning.py --envs HalfCheetah-v5 --systems tempo --scale 0.3 \
        --reuse docs/results/rl_learning_halfcheetah_300k_env_matched.json   # the baseline's runs from there

``--reuse`` takes the runs of the systems not run (same environments, seeds
and step budget) from earlier result files, and summarises and plots them
beside this run's; the JSON names the files (``reused``).
"""
from __future__ import annotations

import argparse
import json
import os
import warnings
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

DISCRETE = dict(num_envs=4, num_steps=128, num_minibatches=4, update_epochs=4, learning_rate=2.5e-4, ent_coef=0.01)
CONTINUOUS = dict(num_envs=1, num_steps=2048, num_minibatches=32, update_epochs=10, learning_rate=3e-4,
                  ent_coef=0.0)
ENVS = {  # env id -> (example, settings, total timesteps, target return)
    "CartPole-v1": ("ppo", DISCRETE, 500_000, 475.0),
    "Acrobot-v1": ("ppo", DISCRETE, 500_000, -100.0),
    "Pendulum-v1": ("ppo_continuous", dict(CONTINUOUS, num_envs=4, num_steps=512), 200_000, -400.0),
    "HalfCheetah-v5": ("ppo_continuous", CONTINUOUS, 1_000_000, 1500.0),
    "Hopper-v5": ("ppo_continuous", CONTINUOUS, 1_000_000, 1500.0),
}
SYSTEMS = ("tempo", "cleanrl", "sb3")
BASELINES = {"cleanrl": "cleanrl_rollout_ppo.py", "sb3": "sb3_ppo.py"}


def flags(settings: dict) -> list[str]:
    """``--name=value`` per setting; a boolean (``True``/``False``, as ``--set`` gives it) is ``--name`` or
    ``--no-name``, the switches every system takes."""
    out = []
    for k, v in settings.items():
        name = k.replace("_", "-")
        if str(v) in ("True", "False"):
            out.append(f"--{name}" if str(v) == "True" else f"--no-{name}")
        else:
            out.append(f"--{name}={v}")
    return out


def command(system: str, env_id: str, seed: int, steps: int, impl: str, backend: str,
            overrides: dict | None = None) -> list[str]:
    example, settings, _, _ = ENVS[env_id]
    common = flags(dict(settings, **(overrides or {}), env_id=env_id, seed=seed, total_timesteps=steps))
    if system in BASELINES:
        return [sys.executable, os.path.join(ROOT, "benchmarks", "baselines", BASELINES[system]), *common]
    extra = [f"--impl={impl}", "--no-track-tensorboard"] + ([f"--backend={backend}"] if backend else [])
    return [sys.executable, "-c", WORKER, os.path.join(ROOT, "examples", f"{example}.py"), *common, *extra]


# runs an example's main() and prints its summary as one JSON line (the episodes, the clocks)
WORKER = """
import json, runpy, sys, time
path, argv = sys.argv[1], sys.argv[2:]
module = runpy.run_path(path, run_name="example")
import tempo as tpo
summary = module["main"](tpo.rl.training.parse_args(module["Args"], "", argv))
print("RESULT " + json.dumps({k: summary[k] for k in ("episodes", "global_step", "sps", "seconds", "cpu_seconds")}))
"""


def worker_env(pycache: str) -> dict:
    """A worker's environment: one thread, this tree first on the path, bytecode cached under ``pycache``."""
    from rl_train import thread_env

    env = dict(thread_env(1), PYTHONPATH=ROOT, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_one(system: str, env_id: str, seed: int, steps: int, impl: str, backend: str, timeout: float,
            overrides: dict | None = None, pycache: str | None = None) -> dict:
    """One training run in a fresh one-thread process: its episodes, its wall and CPU seconds, and the
    machine's 1-minute load average before and after it (``pycache``: the bytecode cache's folder,
    see the module doc; None: a fresh one)."""
    before, load = resource.getrusage(resource.RUSAGE_CHILDREN), [os.getloadavg()[0]]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(command(system, env_id, seed, steps, impl, backend, overrides), capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, env=worker_env(pycache or os.path.join(cwd, "pyc")))
    load.append(os.getloadavg()[0])
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        return {"system": system, "env": env_id, "seed": seed, "failed": done.stderr[-2000:]}
    result = _parse(system, done.stdout)
    return {"system": system, "env": env_id, "seed": seed, "steps": steps, "process_wall_s": wall,
            "process_cpu_s": cpu, "load_avg": load, **result}


def _parse(system: str, stdout: str) -> dict:
    if system == "tempo":
        line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])
    final = stdout.strip().splitlines()[-1]
    return {"final_line": final, **json.loads(stdout.split("EPISODES ", 1)[1].splitlines()[0])}


def curve(episodes: list, grid: np.ndarray, column: int, window: int = 20) -> np.ndarray:
    """The mean return of the last ``window`` episodes finished by each grid point (NaN before any)."""
    if not episodes:
        return np.full(len(grid), np.nan)
    ep = np.asarray(episodes, dtype=np.float64)
    ends = np.searchsorted(ep[:, column], grid, side="right")
    return np.array([ep[max(0, n - window):n, 1].mean() if n else np.nan for n in ends])


def summarise(runs: list[dict], env_id: str, target: float) -> dict:
    """Per system: final return, steps to target, SPS; and Tempo's curve against the baseline's spread."""
    out, grids = {}, {}
    for system in SYSTEMS:
        mine = [r for r in runs if r["system"] == system and r["env"] == env_id and "episodes" in r]
        if not mine:
            continue
        steps = mine[0]["steps"]
        grid = np.linspace(steps / 10, steps, 10)
        curves = np.array([curve(r["episodes"], grid, 0) for r in mine])
        grids[system] = curves
        reached = [_reached(r["episodes"], target) for r in mine]
        out[system] = {
            "seeds": [r["seed"] for r in mine],
            "final_return": [float(c[-1]) for c in curves],
            "steps_to_target": [e and e[0] for e in reached], "target": target,
            "cpu_s_to_target": [e and e[4] for e in reached],  # the run's own CPU clock
            "sps_wall": [r["global_step"] / r["process_wall_s"] for r in mine],
            "sps_cpu": [r["global_step"] / r["process_cpu_s"] for r in mine],
            "sps_in_run": [r["sps"] for r in mine],  # the run's own clocks: compilation in, imports out
            "sps_cpu_in_run": [r["global_step"] / r["cpu_seconds"] for r in mine],
            "return_at_each_10pct_mean": np.nanmean(curves, axis=0).tolist(),
        }
    for base in BASELINES:
        if "tempo" in grids and base in grids:
            tempo = np.nanmean(grids["tempo"], axis=0)
            low, high = np.nanmin(grids[base], axis=0), np.nanmax(grids[base], axis=0)
            out[f"tempo_within_{base}_spread"] = [bool(lo <= v <= hi) for v, lo, hi in zip(tempo, low, high)]
    return out


def _reached(episodes: list, target: float, window: int = 20) -> list | None:
    """The episode at which the mean return of the last ``window`` episodes first reaches ``target``."""
    for k in range(len(episodes)):
        if np.mean([e[1] for e in episodes[max(0, k - window + 1):k + 1]]) >= target:
            return episodes[k]
    return None


def table(summary: dict) -> str:
    """Markdown: one row per environment, system and seed."""
    rows = ["| env | system | seed | final return | env steps to target | CPU s to target | steps/s CPU | "
            "steps/s wall |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env_id, by_system in summary.items():
        for system in SYSTEMS:
            s = by_system.get(system)
            for k, seed in enumerate(s["seeds"] if s else []):
                steps, cpu = s["steps_to_target"][k], s["cpu_s_to_target"][k]
                rows.append(f"| {env_id} | {system} | {seed} | {s['final_return'][k]:.1f} | "
                            f"{'-' if steps is None else f'{steps / 1000:.0f}k'} | "
                            f"{'-' if cpu is None else f'{cpu:.1f}'} | {s['sps_cpu'][k]:.0f} | "
                            f"{s['sps_wall'][k]:.0f} |")
    return "\n".join(rows)


def plot(runs: list[dict], envs: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env_id in zip(axes, envs):
        for system, color in zip(SYSTEMS, ("tab:blue", "tab:orange", "tab:green")):
            mine = [r for r in runs if r["system"] == system and r["env"] == env_id and r.get("episodes")]
            if not mine:
                continue
            for ax, column, label in ((row[0], 0, "environment steps"), (row[1], 3, "wall seconds")):
                end = max(max(e[column] for e in r["episodes"]) for r in mine)
                grid = np.linspace(0, end, 200)
                curves = np.array([curve(r["episodes"], grid, column) for r in mine])
                ax.plot(grid, np.nanmean(curves, axis=0), color=color, label=f"{system} ({len(mine)} seeds)")
                ax.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=color, alpha=0.2)
                ax.set_xlabel(label)
                ax.set_ylabel("episodic return (last 20)")
                ax.set_title(env_id)
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def reused(paths: list[str], envs: list[str], seeds: list[int], systems: list[str], scale: float) -> list[dict]:
    """The runs in the result files ``paths`` of the systems not in ``systems``, on ``envs`` with ``seeds`` and
    the step budget of ``scale``; an error where a file lacks one of them."""
    wanted = {(system, env_id, seed) for system in SYSTEMS if system not in systems for env_id in envs
              for seed in seeds}
    found = {}
    for path in paths:
        with open(path) as f:
            for run in json.load(f)["runs"]:
                key = (run["system"], run["env"], run["seed"])
                if key in wanted and "episodes" in run and run["steps"] == int(ENVS[run["env"]][2] * scale):
                    found[key] = run
    systems_found = {system for system, _, _ in found}
    missing = sorted(k for k in wanted if k[0] in systems_found and k not in found)
    if paths and not found:
        raise SystemExit(f"--reuse: no run of another system with these envs, seeds and steps in {paths}")
    if missing:
        raise SystemExit(f"--reuse: {paths} lack the runs {missing}")
    return [found[k] for k in sorted(found)]


def _impl(args, env_id: str) -> str:
    return args.tempo_impl if env_id in ("CartPole-v1", "Acrobot-v1", "Pendulum-v1") else "gymnasium"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--scale", type=float, default=1.0, help="multiply every step budget (reduced runs)")
    p.add_argument("--tempo-impl", default="gymnasium",
                   help="gymnasium or tensor (CartPole-v1, Acrobot-v1, Pendulum-v1)")
    p.add_argument("--tempo-backend", default="", help="numpy (default), torch or jax")
    p.add_argument("--set", nargs="+", default=[], metavar="FLAG=VALUE",
                   help="hyper-parameters for every system and environment (num_envs=16 num_steps=256; "
                        "bootstrap_truncation=False)")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per run")
    p.add_argument("--reuse", nargs="+", default=[], metavar="JSON",
                   help="earlier result files: their runs of the systems not run here (same envs, seeds, steps)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "rl_learning"),
                   help="output path without extension (.json and .png are written)")
    args = p.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    warnings.filterwarnings("ignore", message="(Mean of empty slice|All-NaN slice)")
    runs = []
    with tempfile.TemporaryDirectory() as pycache:
        for env_id in args.envs:  # untimed: one iteration of each system fills the bytecode cache
            settings = dict(ENVS[env_id][1], **overrides)
            for system in args.systems:
                warm = run_one(system, env_id, args.seeds[0], int(settings["num_envs"]) * int(settings["num_steps"]),
                               _impl(args, env_id), args.tempo_backend, args.timeout, overrides, pycache)
                if "failed" in warm:
                    print(f"{env_id:15s} {system:8s} warm-up failed: {warm['failed'][-300:]}", flush=True)
        for env_id in args.envs:
            steps = int(ENVS[env_id][2] * args.scale)
            for seed in args.seeds:
                for system in args.systems:
                    run = run_one(system, env_id, seed, steps, _impl(args, env_id), args.tempo_backend, args.timeout,
                                  overrides, pycache)
                    runs.append(run)
                    shown = run.get("failed", "")[-300:] or (
                        f"final={curve(run['episodes'], np.array([steps]), 0)[0]:.1f} "
                        f"sps_wall={run['global_step'] / run['process_wall_s']:.0f} "
                        f"sps_cpu={run['global_step'] / run['process_cpu_s']:.0f}")
                    print(f"{env_id:15s} {system:8s} seed={seed} steps={steps} {shown}", flush=True)
    runs += reused(args.reuse, args.envs, args.seeds, args.systems, args.scale)
    summary = {env_id: summarise(runs, env_id, ENVS[env_id][3]) for env_id in args.envs}
    report = {"argv": sys.argv[1:] if argv is None else list(argv), "scale": args.scale, "bytecode": "cached, warmed",
              "reused": args.reuse,
              "tempo_impl": args.tempo_impl, "tempo_backend": args.tempo_backend or "numpy", "set": overrides,
              "summary": summary, "runs": runs}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, separators=(",", ":"))  # every episode of every run: compact
    plot(runs, args.envs, args.out + ".png")
    print(table(summary))
    return report


if __name__ == "__main__":
    main()
