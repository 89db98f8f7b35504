"""envpool against gymnasium as the vector-env backend of a Tempo program (the UDF path), one thread each.

A Tempo program acts in ``B`` environments for ``T`` steps with a fixed
linear controller (it keeps CartPole-v1 balanced, so every step is a real
environment step) under ``impl="gymnasium"`` (one gymnasium environment per
episode, stepped in a Python loop, as ``SyncVectorEnv`` does) and
``impl="envpool"`` (one envpool call per batched step, ``num_threads=1``),
and, for CartPole-v1 and Acrobot-v1, ``impl="tensor"``. The same controller
also drives gymnasium's ``SyncVectorEnv`` and envpool directly, without
Tempo, as baselines. Reported: environment steps per second of wall time and of
process CPU time (the median over repeats, the compiled program re-run;
compilation excluded). BLAS runs on one thread (threadpoolctl). Prints a
table and writes JSON.

    .venv/bin/python benchmarks/vector_envs.py --repeats 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import gymnasium
import numpy as np
from threadpoolctl import threadpool_limits

import tempo as tpo
import tempo.rl
from tempo.files import write_json_atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {"CartPole-v1": (64, 200), "Acrobot-v1": (4, 500), "HalfCheetah-v5": (8, 200)}  # name -> (environments, steps)


def weights(obs_size: int, action_size: int) -> np.ndarray:
    """The controller: CartPole's balancing gains, a fixed random matrix elsewhere."""
    if obs_size == 4:
        return np.array([[0.1], [0.5], [3.0], [1.0]], np.float32)
    return np.random.default_rng(0).normal(0.0, 0.1, (obs_size, action_size)).astype(np.float32)


def act(obs: np.ndarray, w: np.ndarray, discrete: bool) -> np.ndarray:
    y = obs.astype(np.float32) @ w
    return (y[..., 0] > 0).astype(np.int64) if discrete else np.tanh(y)


def tempo_program(name: str, impl: str, batch: int, steps: int):
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        env = tempo.rl.make(name, dims=(b, t), impl=impl)
        w = tpo.from_numpy(weights(env.obs_size, env.action_size))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
        o[b, 0] = env.reset()
        y = (o.cast("float32").unsqueeze(0) @ w).squeeze(0)
        a = (y.spatial[0] > 0).cast("int64") if env.is_discrete else y.tanh()
        next_obs, r, d = env.step(a)
        o[b, t + 1] = next_obs
        program = ctx.compile([r], backend="numpy")
    return lambda: program.run({B: batch, T: steps})


def gymnasium_loop(name: str, batch: int, steps: int):
    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(name) for _ in range(batch)])
    discrete = isinstance(envs.single_action_space, gymnasium.spaces.Discrete)
    w = weights(envs.single_observation_space.shape[0], 1 if discrete else envs.single_action_space.shape[0])

    def run():
        obs, _ = envs.reset(seed=0)
        for _ in range(steps):
            obs, *_ = envs.step(act(obs, w, discrete))
    return run


def envpool_loop(name: str, batch: int, steps: int):
    import envpool

    pool = envpool.make(name, env_type="gymnasium", num_envs=batch, num_threads=1)
    discrete = isinstance(pool.action_space, gymnasium.spaces.Discrete)
    w = weights(pool.observation_space.shape[0], 1 if discrete else pool.action_space.shape[0])

    def run():
        obs, _ = pool.reset()
        for _ in range(steps):
            obs, *_ = pool.step(act(obs, w, discrete))
    return run


def measure(run, repeats: int, env_steps: int) -> dict:
    run()  # warm up: first resets, caches
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"steps_per_s": env_steps / statistics.median(wall), "cpu_steps_per_s": env_steps / statistics.median(cpu),
            "wall_s": wall, "cpu_s": cpu}


def systems(name: str):
    yield "tempo impl=gymnasium", lambda b, s: tempo_program(name, "gymnasium", b, s)
    yield "tempo impl=envpool", lambda b, s: tempo_program(name, "envpool", b, s)
    if name in ("CartPole-v1", "Acrobot-v1"):
        yield "tempo impl=tensor", lambda b, s: tempo_program(name, "tensor", b, s)
    yield "gymnasium SyncVectorEnv", lambda b, s: gymnasium_loop(name, b, s)
    yield "envpool", lambda b, s: envpool_loop(name, b, s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default=",".join(CASES), help="environment ids, comma-separated")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "vector_envs.json"))
    args = parser.parse_args()
    rows = []
    print(f"{'environment':<15} {'B':>3} {'T':>4} {'system':<24} {'steps/s':>10} {'CPU steps/s':>12}")
    with threadpool_limits(limits=1):
        for name in args.envs.split(","):
            batch, steps = CASES[name]
            for system, build in systems(name):
                row = {"env": name, "batch": batch, "steps": steps, "system": system,
                       **measure(build(batch, steps), args.repeats, batch * steps)}
                rows.append(row)
                print(f"{name:<15} {batch:>3} {steps:>4} {system:<24} {row['steps_per_s']:>10.0f} "
                      f"{row['cpu_steps_per_s']:>12.0f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out, {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
