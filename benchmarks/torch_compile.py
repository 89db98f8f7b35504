"""Does ``torch.compile`` pay for Tempo's fused islands? PPO's islands, eager against compiled.

Compiles PPO (``examples/ppo_fixed_horizon.py``, ``tempo/Synthetic-v0``, the default RL
point of ``benchmarks/rl_train.py`` unless flags say otherwise) for the torch
backend, runs one iteration to capture each fused island's inputs, then
times the largest acting island (run once per step) and the largest
learning island (once per iteration) eagerly and through ``torch.compile``
(its first call, the compile, timed apart).

    .venv/bin/python benchmarks/torch_compile.py
    .venv/bin/python benchmarks/torch_compile.py --envs 64 --steps 50
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def capture(args) -> list:
    """(island op, its kernel, inputs, env, point) for each fused island's first launch."""
    import tempo.runtime.backends.torch as torch_backend

    seen, real = {}, torch_backend.TorchBackend.kernel

    def kernel(self, op):
        run = real(self, op)
        if op.name != "FusedOp":
            return run

        def probe(inputs, env, point):
            seen.setdefault(id(op), (op, run, [x.clone() for x in inputs], dict(env), point))
            return run(inputs, env, point)

        return probe

    torch_backend.TorchBackend.kernel = kernel
    spec = importlib.util.spec_from_file_location("ppo", os.path.join(ROOT, "examples", "ppo_fixed_horizon.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo"] = module
    spec.loader.exec_module(module)
    module.main(module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape="3,4,4", batch=args.envs,
                            steps=args.steps, hidden=args.hidden, layers=2, iterations=2, epochs=1, seed=0,
                            backend="torch"))
    torch_backend.TorchBackend.kernel = real
    return list(seen.values())


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, default=512)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    islands = capture(args)
    acting = [x for x in islands if "t" in x[3]]  # the env holds the point's dims next to the bounds
    learning = [x for x in islands if "t" not in x[3] and "i" in x[3]]
    for label, group in (("acting", acting), ("learning", learning)):
        op, run, inputs, env, point = max(group, key=lambda x: len(x[0].steps))
        eager = timed(lambda: run(inputs, env, point), args.repeats)
        compiled = torch.compile(lambda *xs: run(list(xs), env, point), dynamic=False)
        start = time.perf_counter()
        compiled(*inputs)
        compile_s = time.perf_counter() - start
        fast = timed(lambda: compiled(*inputs), args.repeats)
        print(f"{label} island ({len(op.steps)} steps): eager {eager * 1e3:.3f} ms, torch.compile {fast * 1e3:.3f} ms "
              f"per call after a {compile_s:.1f} s compile")
    print(f"{len(islands)} fused islands in the program")


if __name__ == "__main__":
    main()
