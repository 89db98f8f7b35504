"""Memory of REINFORCE with large observations: Monte-Carlo against n-step returns (TEMPO §7.4, Fig. 23).

``examples/reinforce.py`` on ``tempo/Synthetic-v0`` with 3x64x64 float32
observations and 4 environments, Monte-Carlo returns (``r[t:T]``) and
8-step returns (``r[t:min(t + 8, T)]``), at each episode length given. Each
run is a fresh process on the NumPy backend with one BLAS thread; reported
per run: the observations one iteration produces, the peak bytes held in
tensor stores (the device tier of ``program.memory_report()``), the
process's peak RSS, and the steady-state seconds per iteration. A PNG shows
the bytes held over the run (kernel launches on the x axis) for each
return estimator at the longest episode.

    .venv/bin/python benchmarks/memory.py                     # T = 1000 and 4000
    .venv/bin/python benchmarks/memory.py --steps 250 --quick # a smoke test
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def child(spec: dict, out_path: str) -> None:
    """Train in this process and write what was measured to ``out_path``."""
    from rl_train import _example

    from tempo.api import compile as compile_mod

    module = _example("reinforce")
    programs, compile_program = [], compile_mod.compile_program

    def probed(*args, **kwargs):
        program = compile_program(*args, **kwargs)
        programs.append(program)
        return program

    compile_mod.compile_program = probed
    args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape="3,64,64", batch=spec["envs"],
                       steps=spec["steps"], iterations=spec["iterations"], nstep=spec["nstep"], hidden=32)
    summary = module.main(args)
    (program,) = programs
    ledger = program.ledger
    result = dict(spec, store_peak_bytes=ledger.peak["device"], peak_rss_bytes=resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss * 1024, seconds_per_iteration=summary["seconds_per_iteration"],
        observation_bytes=spec["envs"] * spec["steps"] * 3 * 64 * 64 * 4, launches=ledger.launches,
        timeline=ledger.timeline, holders=sorted(ledger.peak_holders.items(), key=lambda kv: -kv[1])[:5])
    with open(out_path, "w") as f:
        json.dump(result, f)


def run(spec: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec), out], env=env,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the run {spec} failed:\n{done.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    longest = max(r["steps"] for r in results)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for r in results:
        if r["steps"] != longest:
            continue
        xs = [s[0] for s in r["timeline"]] + [r["launches"]]
        ys = [s[1] / 2**20 for s in r["timeline"]] + [r["timeline"][-1][1] / 2**20 if r["timeline"] else 0]
        ax.step(xs, ys, where="post", label="Monte-Carlo" if r["nstep"] == 0 else f"{r['nstep']}-step")
    ax.set_xlabel("kernel launches")
    ax.set_ylabel("MiB held in tensor stores")
    ax.set_title(f"REINFORCE, 3x64x64 observations, T={longest}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 4000], help="episode lengths T")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two iterations per run")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "memory_reinforce.json"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child[0]), args.child[1])
        return
    iterations = 2 if args.quick else args.iterations
    results = [run({"steps": steps, "nstep": nstep, "envs": args.envs, "iterations": iterations})
               for steps in args.steps for nstep in (0, 8)]
    mib = 2**20
    print(f"REINFORCE, tempo/Synthetic-v0, 3x64x64 observations, {args.envs} environments, NumPy backend")
    print(f"{'T':>6} {'returns':>12} {'obs MiB':>8} {'store peak MiB':>15} {'process peak MiB':>17} {'s/iter':>7}")
    for r in results:
        label = "Monte-Carlo" if r["nstep"] == 0 else f"{r['nstep']}-step"
        print(f"{r['steps']:>6} {label:>12} {r['observation_bytes'] / mib:>8.0f} {r['store_peak_bytes'] / mib:>15.0f} "
              f"{r['peak_rss_bytes'] / mib:>17.0f} {r['seconds_per_iteration']:>7.2f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"results": results}, f)
    os.replace(args.out + ".tmp", args.out)
    png = os.path.splitext(args.out)[0] + ".png"
    plot(results, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
