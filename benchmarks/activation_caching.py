"""Activation caching (TEMPO §7.3): executed operations per iteration with the pass on and off.

PPO (``examples/ppo_fixed_horizon.py``, one update per batch) replays the actor and the
critic over the batch it just collected, with the parameters that collected
it; the ``cache_activations`` pass lets the learner read the activations
acting computed instead. This script runs the same program with the pass on
and off on ``tempo/Synthetic-v0`` and counts, per iteration, every operation
the NumPy backend executes (each op of a fused island counted on its own),
their floating-point work (a matrix product of ``m x k`` by ``k x n`` counts
``2mkn``, any other op one per output element), and the kernel launches, and
times the iterations. The two runs must train identically: the script
checks that their returns agree.

    .venv/bin/python benchmarks/activation_caching.py              # TEMPO's default point
    .venv/bin/python benchmarks/activation_caching.py --quick      # a smoke test, seconds
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_train import ROOT, Point, _example, _flops  # noqa: E402

from tempo.api import compile as compile_mod  # noqa: E402
from tempo.ir import ops  # noqa: E402
from tempo.runtime.backends import numpy as numpy_backend  # noqa: E402


class OpCounter:
    """Wraps the NumPy backend's kernel factories: counts ops, FLOPs and launches per iteration ``env["i"]``."""

    def __init__(self):
        self.ops: collections.Counter = collections.Counter()
        self.flops: collections.Counter = collections.Counter()
        self.launches: collections.Counter = collections.Counter()
        self.ends: dict[int, float] = {}
        self._saved = dict(numpy_backend.KERNELS)

    def __enter__(self):
        for op_type, factory in self._saved.items():
            if op_type is not ops.FusedOp:
                numpy_backend.KERNELS[op_type] = self._counting(factory)
        return self

    def __exit__(self, *exc):
        numpy_backend.KERNELS.clear()
        numpy_backend.KERNELS.update(self._saved)

    def _counting(self, factory):
        def make(op):
            kernel = factory(op)

            def run(inputs, env, point):
                out = kernel(inputs, env, point)
                i = env.get("i")
                self.ops[i] += 1
                self.flops[i] += _flops(op, inputs, out)
                return out

            return run

        return make

    def probe(self, backend):
        """``backend`` with its launches counted and each iteration's last launch timed."""
        counter = self

        class Probe:
            def kernel(self, op):
                kernel = backend.kernel(op)

                def launched(inputs, env, point):
                    out = kernel(inputs, env, point)
                    i = env.get("i")
                    counter.launches[i] += 1
                    counter.ends[i] = time.perf_counter()
                    return out

                return launched

            def __getattr__(self, name):
                return getattr(backend, name)

        return Probe()


def run(point: Point, iterations: int, cache: bool) -> dict:
    """Train PPO at ``point`` for ``iterations`` (plus one that does not learn) and count."""
    module = _example("ppo_fixed_horizon")
    args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape=point.obs_shape, batch=point.envs,
                       steps=point.steps, hidden=point.hidden, layers=point.layers, iterations=iterations + 1,
                       epochs=1)
    counter, compile_program, compiled = OpCounter(), compile_mod.compile_program, []

    def probed(*a, **kw):
        kw["passes"] = {**(kw.get("passes") or {}), **({} if cache else {"cache_activations": False})}
        program = compile_program(*a, **kw)
        program.backend = counter.probe(program.backend)
        compiled.append(time.perf_counter())
        return program

    compile_mod.compile_program = probed
    try:
        with counter:
            summary = module.main(args)
    finally:
        compile_mod.compile_program = compile_program
    ends = [compiled[0]] + [counter.ends[k] for k in range(iterations)]
    seconds = [b - a for a, b in zip(ends, ends[1:])]
    last = iterations - 1
    return {"cache_activations": cache, "ops_per_iteration": counter.ops[last],
            "flops_per_iteration": counter.flops[last], "launches_per_iteration": counter.launches[last],
            "seconds_per_iteration": statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0],
            "returns": summary["returns"][:iterations]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4, help="timed iterations per run")
    parser.add_argument("--quick", action="store_true", help="a small point, two iterations")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "activation_caching.json"))
    args = parser.parse_args()
    point = Point(steps=20, envs=16, hidden=16) if args.quick else Point()
    iterations = 2 if args.quick else args.iterations
    runs = [run(point, iterations, cache) for cache in (False, True)]
    off, on = runs
    same = np.allclose(off["returns"], on["returns"], rtol=1e-4)
    print(f"PPO, tempo/Synthetic-v0, {point}, NumPy backend")
    print(f"{'cache_activations':<18} {'ops/iter':>9} {'GFLOP/iter':>11} {'launches/iter':>14} {'s/iter':>8}")
    for r in runs:
        print(f"{'on' if r['cache_activations'] else 'off':<18} {r['ops_per_iteration']:>9} "
              f"{r['flops_per_iteration'] / 1e9:>11.3f} {r['launches_per_iteration']:>14} "
              f"{r['seconds_per_iteration']:>8.3f}")
    print(f"returns identical with the pass on and off: {same}")
    result = {"point": vars(point), "iterations": iterations, "runs": runs, "returns_agree": bool(same)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    if not same:
        raise SystemExit("the returns differ with the pass on and off")


if __name__ == "__main__":
    main()
