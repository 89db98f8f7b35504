"""The CPU cost of one MuJoCo environment step, the part of a PPO step both systems pay alike.

For each environment, at one thread, with actions drawn from a standard
normal (as an untrained policy draws them) and episodes run to their time
limit, three layers of the step ``benchmarks/rl_learning.py`` runs:

- ``simulator``: the bare environment's ``step`` (``env.unwrapped``: the
  MuJoCo integration and gymnasium's reward and observation code);
- ``tempo_vector``: what Tempo's UDF steps (``impl="gymnasium"``): a
  one-environment same-step autoreset ``SyncVectorEnv`` of
  ``gymnasium.make``'s environment (Tempo normalises in its own program);
- ``cleanrl_vector``: what the CleanRL-style loop steps: the same vector env
  of CleanRL's wrappers (episode statistics, action clip, observation and
  reward normalisation), as ``make_env`` of
  ``benchmarks/baselines/cleanrl_rollout_ppo.py`` builds them.

Reported: microseconds of process CPU and of wall time per step, the median
of ``--repeats``. Set ``--tempo-json`` to a ``rl_learning.py`` result to
add the share of Tempo's and the baseline's CPU per environment step (the
whole run's process CPU over its steps) that the simulator takes.

    .venv/bin/python benchmarks/mujoco_step.py --out docs/results/mujoco_step.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import gymnasium
import numpy as np
from threadpoolctl import threadpool_limits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "baselines"))

from cleanrl_rollout_ppo import make_env  # noqa: E402

LAYERS = ("simulator", "tempo_vector", "cleanrl_vector")


def stepper(env_id: str, layer: str):
    """``(env, reset, step(action))`` for one layer of the step."""
    if layer != "simulator":
        factory = make_env(env_id, 0.99) if layer == "cleanrl_vector" else (lambda: gymnasium.make(env_id))
        env = gymnasium.vector.SyncVectorEnv([factory], autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
                                             copy=layer == "cleanrl_vector")
        return env, (lambda: env.reset(seed=0)), (lambda a: env.step(a[None]))
    env = gymnasium.make(env_id)
    bare, limit, count = env.unwrapped, env.spec.max_episode_steps, [0]

    def step(action):
        count[0] += 1
        out = bare.step(action)
        if out[2] or count[0] % limit == 0:
            bare.reset()
        return out
    return env, (lambda: env.reset(seed=0)), step


def measure(env_id: str, layer: str, steps: int) -> tuple[float, float]:
    """Microseconds of process CPU and of wall time per step over ``steps`` steps."""
    env, reset, step = stepper(env_id, layer)
    reset()
    space = getattr(env, "single_action_space", env.action_space)
    actions = np.random.default_rng(0).normal(size=(steps,) + space.shape).astype(np.float32)
    if layer != "cleanrl_vector":  # clipped, as Tempo's step and CleanRL's ClipAction hand them on
        actions = np.clip(actions, space.low, space.high)
    cpu, wall = time.process_time(), time.perf_counter()
    for a in actions:
        step(a)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    env.close()
    return 1e6 * cpu / steps, 1e6 * wall / steps


def tempo_costs(path: str, env_id: str) -> dict:
    """Microseconds of process CPU per environment step of each system's runs in a ``rl_learning.py`` result."""
    with open(path) as f:
        runs = [r for r in json.load(f)["runs"] if r["env"] == env_id and "global_step" in r]
    out = {}
    for r in runs:
        out.setdefault(r["system"], []).append(1e6 * r["process_cpu_s"] / r["global_step"])
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tempo-json", nargs="*", default=[], help="rl_learning.py results to set the costs against")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    rows, report = [], {"argv": sys.argv[1:] if argv is None else list(argv), "load_avg": [os.getloadavg()[0]],
                        "envs": {}}
    with threadpool_limits(1):
        for env_id in args.envs:
            costs = {}
            for layer in LAYERS:
                runs = [measure(env_id, layer, args.steps) for _ in range(args.repeats)]
                costs[layer] = {"cpu_us": statistics.median(c for c, _ in runs),
                                "wall_us": statistics.median(w for _, w in runs)}
            entry = {"per_step": costs}
            for path in args.tempo_json:
                for system, per_step in tempo_costs(path, env_id).items():
                    entry.setdefault("runs_cpu_us_per_step", {}).setdefault(system, []).extend(per_step)
            for system, per_step in entry.get("runs_cpu_us_per_step", {}).items():
                entry.setdefault("simulator_share", {})[system] = [costs["simulator"]["cpu_us"] / c for c in per_step]
            report["envs"][env_id] = entry
            for layer in LAYERS:
                rows.append(f"| {env_id} | {layer} | {costs[layer]['cpu_us']:.1f} | {costs[layer]['wall_us']:.1f} |")
    report["load_avg"].append(os.getloadavg()[0])
    print("| env | step | us CPU | us wall |\n| --- | --- | --- | --- |\n" + "\n".join(rows))
    for env_id, entry in report["envs"].items():
        for system, shares in entry.get("simulator_share", {}).items():
            costs = ", ".join(f"{c:.0f}" for c in entry["runs_cpu_us_per_step"][system])
            share = ", ".join(f"{s:.0%}" for s in shares)
            print(f"{env_id} {system}: CPU per step {costs} us; simulator share {share}")
    if args.out:
        from tempo.files import write_json_atomic

        write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
