"""Memory experiments (TEMPO §7.4): REINFORCE Monte-Carlo against n-step (Fig. 23), PPO under a device budget
(Fig. 21), and recomputation against keeping activations under a budget.

**REINFORCE** -- ``examples/reinforce.py`` on ``tempo/Synthetic-v0`` with
3x64x64 float32 observations and 4 environments, Monte-Carlo returns
(``r[t:T]``) and 8-step returns (``r[t:min(t + 8, T)]``), at each episode
length given, the learner in tiles of ``--tiles`` steps (the example's ``--tiles``) and
a checkpoint written after every iteration (so the last iteration learns
too). With 8-step returns the tiles run inside the acting loop, each a few
steps behind it, and free the observations they learned from; Monte-Carlo
returns need the episode's end. Reported per run: the observations one
iteration produces, the peak bytes held in tensor stores (the device tier of
``program.memory_report()``) and its ratio to Monte-Carlo's, the process's
peak RSS, and the steady-state seconds per iteration. ``--tiles 0
--no-checkpoint`` runs the example as given no flag beyond ``--nstep`` (the
compiler chooses the tiles). ``--backends numpy jax`` runs each point on
both backends; beside the process peak, a run reports the resident bytes
of its backend's runtime started by a trivial op (JAX's client and
libraries) before Tempo is imported, what importing Tempo adds, the
resident bytes after the run once glibc gives its free pages back, and, on JAX, what clearing every jit cache gives back (the
compiled kernels) and how many kernels XLA compiled. A PNG shows the bytes held in stores over the run
(kernel launches on the x axis) for each return estimator at the longest
episode.

**PPO under a device budget** -- ``examples/ppo_fixed_horizon.py`` and the CleanRL-style
baseline (``benchmarks/baselines/cleanrl_ppo.py``) on ``tempo/Synthetic-v0``
with observations from 3x16x16 to 3x256x256, 4 environments, ``--ppo-steps``
timesteps. The baseline's device memory is what training adds to its
process (peak RSS after the run minus before it: the batch it stores, the
activations and gradients of its update); it is run up to the first size
over the budget. Tempo runs with ``memory={"device_budget": ...}``: the
tiling pass cuts the learner into tiles that fit the budget and acting's
output lives in the host tier; reported are the ledger's device and host
peaks, the process's peak RSS and the seconds per iteration. A PNG draws
device memory against observation size with the budget, and the bytes
each tier holds over Tempo's run at the largest size.

**Recomputation** -- ``examples/ppo_fixed_horizon.py`` at TEMPO's default point (3x4x4
observations, 512 environments, T=250, two hidden layers of 64), where the
activations outweigh the observations, without a budget and under each of
``--recompute-budgets``, with the activation-caching pass choosing by the
CPU's cost model (the host tier is the same memory: every activation is
kept and swapped) and by a GPU's (the host link is slow: the learner
recomputes its forward), both run here. Reported: whether the run fits,
device and host peaks, the learner nodes that read cached activations, seconds per
iteration, and whether every run's returns are identical.

**Swap plans** -- ``examples/ppo_fixed_horizon.py`` as in the PPO experiment, under the
same budget, with the default swap plan (every large tensor the learner
reads in slices lives in the host tier) and with ``tempo.memplan``'s
(``memory={"plan": "memplan"}``: the memory-mapping game keeps on the
device what fits), alternated ``--plan-repeats`` times. Reported: device and
host peaks, the bytes evicted and loaded, the seconds the plan took to make,
the seconds per iteration, and whether the returns are identical.

Each run is a fresh process with one BLAS thread, on the NumPy backend unless ``--backends`` says otherwise.

    .venv/bin/python benchmarks/memory.py                      # every experiment
    .venv/bin/python benchmarks/memory.py --experiments ppo    # PPO only
    .venv/bin/python benchmarks/memory.py --steps 250 --ppo-steps 100 --quick  # a smoke test
    .venv/bin/python benchmarks/memory.py --experiments swap-plan --plan-obs 3,64,64   # swap plans only
    .venv/bin/python benchmarks/memory.py --experiments reinforce --tiles 0 --no-checkpoint --backends numpy jax \
        --iterations 2 --out docs/results/memory_reinforce_flagless.json   # no flag beyond --nstep, both backends
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
MIB = 2**20


def _probed_example(name: str):
    """The example module ``name``, and the list each program it compiles is appended to."""
    from rl_train import _example

    from tempo.api import compile as compile_mod

    module = _example(name)
    programs, compile_program = [], compile_mod.compile_program

    def probed(*args, **kwargs):
        program = compile_program(*args, **kwargs)
        if not any(p is program for p in programs):  # compile_program's retry without early tiles returns its own
            programs.append(program)
        return program

    compile_mod.compile_program = probed
    return module, programs


def parse_bytes(text: str) -> int:
    """``tempo.runtime.memory.parse_bytes``, imported when called: a child measures its runtime
    before Tempo is imported."""
    from tempo.runtime.memory import parse_bytes as parse

    return parse(text)


def _rss() -> int:
    """The process's resident bytes now (Linux's ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def _trimmed_rss() -> int:
    """The resident bytes once collected garbage and the free pages glibc's heap keeps are given back."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _rss()


def _runtime_rss(backend: str) -> int:
    """The resident bytes of this process with ``backend``'s runtime started by a trivial op (JAX's
    client, its thread pools and libraries: a floor every program on that backend pays)."""
    if backend == "jax":
        import jax.numpy as jnp

        jnp.zeros(4).block_until_ready()
    return _rss()


def child(spec: dict, out_path: str) -> None:
    """Train in this process and write what was measured to ``out_path``."""
    backend = spec.get("backend", "numpy")
    runtime_rss, compiles = _runtime_rss(backend), []
    import tempo  # noqa: F401  (what importing Tempo adds, measured apart from the runtime)

    import_rss = _rss()
    if backend == "jax":
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(
            lambda event, seconds, **_: compiles.append(event) if "backend_compile" in event else None)
    module, programs = _probed_example("reinforce")
    with tempfile.TemporaryDirectory() as tmp:  # a checkpoint per iteration: the last one learns too
        saved = {"checkpoint": os.path.join(tmp, "policy.safetensors"), "checkpoint_every": 1} \
            if spec.get("checkpoint", True) else {}
        args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape="3,64,64", batch=spec["envs"],
                           steps=spec["steps"], iterations=spec["iterations"], nstep=spec["nstep"], hidden=32,
                           tiles=spec["tiles"], backend=backend, **saved)
        summary = module.main(args)
    (program,) = programs
    ledger = program.ledger
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    end_rss = _trimmed_rss()
    if backend == "jax":  # the compiled kernels' share: what dropping every jit cache gives back
        import jax

        jax.clear_caches()
    result = dict(spec, store_peak_bytes=ledger.peak["device"], peak_rss_bytes=peak_rss,
                  runtime_rss_bytes=runtime_rss, import_rss_bytes=import_rss, end_rss_bytes=end_rss,
                  kernels_rss_bytes=end_rss - _trimmed_rss(),
                  compiles=len(compiles),
                  seconds_per_iteration=summary["seconds_per_iteration"],
                  observation_bytes=spec["envs"] * spec["steps"] * 3 * 64 * 64 * 4, launches=ledger.launches,
                  timeline=ledger.timeline, holders=sorted(ledger.peak_holders.items(), key=lambda kv: -kv[1])[:5],
                  tiles_chosen={name: size for name, (_, size) in program.sdg.tiles.items()})
    with open(out_path, "w") as f:
        json.dump(result, f)


def ppo_child(spec: dict, out_path: str) -> None:
    """One PPO run of ``spec["system"]`` ("cleanrl" or "tempo") in this process; writes what was measured."""
    def peak_rss() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    obs = spec["obs"]
    if spec["system"] == "cleanrl":
        sys.path.insert(0, os.path.join(ROOT, "benchmarks", "baselines"))
        import cleanrl_ppo
        from args import PPOArgs

        args = PPOArgs(iterations=spec["iterations"], envs=spec["envs"], steps=spec["steps"], obs_shape=obs,
                       hidden=spec["hidden"])
        before = peak_rss()
        out = cleanrl_ppo.main(args)
        ends = out["ends"]
        result = dict(spec, device_bytes=peak_rss() - before, host_bytes=0, peak_rss_bytes=peak_rss(),
                      seconds_per_iteration=(ends[-1] - ends[0]) / max(1, len(ends) - 1))
    else:
        module, programs = _probed_example("ppo_fixed_horizon")
        args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape=obs, batch=spec["envs"],
                           steps=spec["steps"], iterations=spec["iterations"], epochs=1, hidden=spec["hidden"],
                           device_budget=str(spec["budget"]))
        summary = module.main(args)
        (program,) = programs
        ledger = program.ledger
        result = dict(spec, device_bytes=ledger.peak["device"], host_bytes=ledger.peak["host"],
                      peak_rss_bytes=peak_rss(), seconds_per_iteration=summary["seconds_per_iteration"],
                      launches=ledger.launches, timeline=ledger.timeline,
                      tiles={name: size for name, (_, size) in program.sdg.tiles.items()})  # tile dim bound -> rows
    with open(out_path, "w") as f:
        json.dump(result, f)


def recompute_child(spec: dict, out_path: str) -> None:
    """One Tempo PPO run under ``spec["budget"]`` with the cost model of ``spec["costs"]``
    (``"gpu"``: the choices a GPU's costs make, run on this CPU); writes what was measured."""
    from tempo.errors import TempoError
    from tempo.transforms import cache_activations

    cache_activations.COSTS["cpu"] = cache_activations.COSTS[spec["costs"]]
    module, programs = _probed_example("ppo_fixed_horizon")
    args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape=spec["obs"], batch=spec["envs"],
                       steps=spec["steps"], iterations=spec["iterations"], epochs=1, hidden=spec["hidden"],
                       device_budget=str(spec["budget"]) if spec["budget"] else "")
    try:
        summary = module.main(args)
    except TempoError as err:
        result = dict(spec, fits=False, error=str(err).splitlines()[0][:300])
    else:
        (program,) = programs
        cache = next(st for st in program.pass_stats if st.name == "cache_activations")
        result = dict(spec, fits=True, device_bytes=program.ledger.peak["device"],
                      host_bytes=program.ledger.peak["host"], returns=summary["returns"],
                      seconds_per_iteration=summary["seconds_per_iteration"], cached_nodes=cache.nodes_before - cache.nodes_after,
                      tiles={name: size for name, (_, size) in program.sdg.tiles.items()})
    with open(out_path, "w") as f:
        json.dump(result, f)


def recompute_experiment(args) -> None:
    """PPO at TEMPO's default point under device budgets: activations kept (and swapped) by the
    CPU's cost model, or recomputed where a GPU's cost model says so."""
    runs = [(None, "cpu")] + [(parse_bytes(b), costs) for b in args.recompute_budgets for costs in ("cpu", "gpu")]
    results = [run({"experiment": "recompute", "obs": "3,4,4", "envs": 512, "steps": 250, "hidden": 64,
                    "iterations": 2 if args.quick else 4, "budget": budget, "costs": costs})
               for budget, costs in runs]
    print("PPO, tempo/Synthetic-v0 3x4x4, 512 environments, T=250, 2x64 hidden, NumPy backend")
    print(f"{'budget MiB':>10} {'cost model':>10} {'fits':>5} {'device MiB':>11} {'host MiB':>9} "
          f"{'learner nodes cached':>20} {'s/iter':>7}  tiles")
    for r in results:
        budget = f"{r['budget'] / MIB:.0f}" if r["budget"] else "none"
        if not r["fits"]:
            print(f"{budget:>10} {r['costs']:>10} {'no':>5}  {r['error'][:90]}")
            continue
        print(f"{budget:>10} {r['costs']:>10} {'yes':>5} {r['device_bytes'] / MIB:>11.1f} {r['host_bytes'] / MIB:>9.1f} "
              f"{r['cached_nodes']:>20} {r['seconds_per_iteration']:>7.2f}  {r['tiles'] or ''}")
    returns = {tuple(r["returns"]) for r in results if r["fits"]}
    print("returns identical in every run that fits:", len(returns) == 1)
    write(args.recompute_out, {"results": results, "returns_identical": len(returns) == 1})
    print(f"wrote {args.recompute_out}")


def swap_plan_child(spec: dict, out_path: str) -> None:
    """One Tempo PPO run under ``spec["budget"]`` with the swap plan ``spec["plan"]``; writes what was measured."""
    from tempo.api import compile as compile_mod

    module, programs = _probed_example("ppo_fixed_horizon")
    probed = compile_mod.compile_program

    def planned(*a, **k):
        k["memory"] = {**(k.get("memory") or {}), "plan": spec["plan"]}
        return probed(*a, **k)

    compile_mod.compile_program = planned
    args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape=spec["obs"], batch=spec["envs"],
                       steps=spec["steps"], iterations=spec["iterations"], epochs=1, hidden=spec["hidden"],
                       device_budget=str(spec["budget"]))
    start = time.process_time()
    summary = module.main(args)
    cpu = time.process_time() - start
    (program,) = programs
    ledger = program.ledger
    result = dict(spec, device_bytes=ledger.peak["device"], host_bytes=ledger.peak["host"],
                  evicted_bytes=ledger.evicted, loaded_bytes=ledger.loaded, plan_seconds=program.timings["swap"],
                  seconds_per_iteration=summary["seconds_per_iteration"], cpu_seconds=cpu,
                  returns=summary["returns"])
    with open(out_path, "w") as f:
        json.dump(result, f)


def swap_plan_experiment(args) -> None:
    """PPO under the budget with the default swap plan and with tempo.memplan's, alternated."""
    budget = parse_bytes(args.budget)
    results = [run({"experiment": "swap-plan", "obs": obs, "envs": args.envs, "steps": args.ppo_steps,
                    "hidden": args.hidden, "iterations": 2 if args.quick else args.ppo_iterations, "budget": budget,
                    "plan": plan, "repeat": k})
               for obs in args.plan_obs for k in range(args.plan_repeats) for plan in ("default", "memplan")]
    print(f"PPO, tempo/Synthetic-v0, {args.envs} environments, T={args.ppo_steps}, hidden {args.hidden}, "
          f"device budget {budget / MIB:.0f} MiB, NumPy backend")
    print(f"{'observation':>12} {'plan':>8} {'device MiB':>11} {'host MiB':>9} {'evicted MiB':>12} "
          f"{'loaded MiB':>11} {'plan s':>7} {'s/iter':>7} {'CPU s':>7}")
    for r in results:
        print(f"{r['obs'].replace(',', 'x'):>12} {r['plan']:>8} {r['device_bytes'] / MIB:>11.1f} "
              f"{r['host_bytes'] / MIB:>9.1f} {r['evicted_bytes'] / MIB:>12.0f} {r['loaded_bytes'] / MIB:>11.0f} "
              f"{r['plan_seconds']:>7.2f} {r['seconds_per_iteration']:>7.2f} {r['cpu_seconds']:>7.1f}")
    identical = all(len({tuple(r["returns"]) for r in results if r["obs"] == obs}) == 1 for obs in args.plan_obs)
    print("returns identical under both plans:", identical)
    write(args.swap_plan_out, {"budget_bytes": budget, "results": results, "returns_identical": identical})
    print(f"wrote {args.swap_plan_out}")


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
        returns = "Monte-Carlo" if r["nstep"] == 0 else f"{r['nstep']}-step"
        ax.step(xs, ys, where="post", label=f"{returns}, {r.get('backend', 'numpy')}")
    ax.set_xlabel("kernel launches")
    ax.set_ylabel("MiB held in tensor stores")
    ax.set_title(f"REINFORCE, 3x64x64 observations, T={longest}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def reinforce_experiment(args) -> None:
    iterations = 2 if args.quick else args.iterations
    results = [run({"steps": steps, "nstep": nstep, "envs": args.envs, "iterations": iterations, "tiles": args.tiles,
                    "backend": backend, "checkpoint": args.checkpoint})
               for backend in args.backends for steps in args.steps for nstep in (0, 8)]
    tiles = f"learner in tiles of {args.tiles} steps" if args.tiles else "tiles chosen by the compiler"
    saved = "a checkpoint every iteration" if args.checkpoint else "no checkpoint"
    print(f"REINFORCE, tempo/Synthetic-v0, 3x64x64 observations, {args.envs} environments, {tiles}, {saved}")
    print(f"{'backend':>8} {'T':>6} {'returns':>12} {'obs MiB':>8} {'store peak MiB':>15} {'vs MC':>6} "
          f"{'process peak MiB':>17} {'vs MC':>6} {'runtime MiB':>12} {'+tempo MiB':>11} {'end MiB':>8} "
          f"{'kernels MiB':>12} {'compiles':>9} {'s/iter':>7}")
    for r in results:
        label = "Monte-Carlo" if r["nstep"] == 0 else f"{r['nstep']}-step"
        mc = next(m for m in results if (m["backend"], m["steps"], m["nstep"]) == (r["backend"], r["steps"], 0))
        print(f"{r['backend']:>8} {r['steps']:>6} {label:>12} {r['observation_bytes'] / MIB:>8.0f} "
              f"{r['store_peak_bytes'] / MIB:>15.1f} {r['store_peak_bytes'] / mc['store_peak_bytes']:>6.3f} "
              f"{r['peak_rss_bytes'] / MIB:>17.0f} {r['peak_rss_bytes'] / mc['peak_rss_bytes']:>6.2f} "
              f"{r['runtime_rss_bytes'] / MIB:>12.0f} {(r['import_rss_bytes'] - r['runtime_rss_bytes']) / MIB:>11.1f} "
              f"{r['end_rss_bytes'] / MIB:>8.0f} "
              f"{r['kernels_rss_bytes'] / MIB:>12.0f} {r['compiles']:>9} {r['seconds_per_iteration']:>7.2f}")
    write(args.out, {"tiles": args.tiles, "checkpoint": args.checkpoint, "results": results})
    png = os.path.splitext(args.out)[0] + ".png"
    plot(results, png)
    print(f"wrote {args.out} and {png}")


def ppo_experiment(args) -> None:
    """Both systems at each observation size; the baseline until it goes over the budget."""
    budget = parse_bytes(args.budget)
    results, baseline_over = [], False
    for obs in args.obs:
        spec = {"obs": obs, "envs": args.envs, "steps": args.ppo_steps, "hidden": args.hidden,
                "iterations": 2 if args.quick else args.ppo_iterations, "budget": budget}
        if not baseline_over:
            base = run(dict(spec, system="cleanrl"))
            baseline_over = base["device_bytes"] > budget
            results.append(base)
        results.append(run(dict(spec, system="tempo")))
    print(f"PPO, tempo/Synthetic-v0, {args.envs} environments, T={args.ppo_steps}, hidden {args.hidden}, "
          f"device budget {budget / MIB:.0f} MiB, NumPy backend")
    print(f"{'observation':>12} {'system':>8} {'device MiB':>11} {'host MiB':>9} {'fits':>5} {'process MiB':>12} "
          f"{'s/iter':>7}  tiles")
    for r in results:
        print(f"{r['obs'].replace(',', 'x'):>12} {r['system']:>8} {r['device_bytes'] / MIB:>11.0f} "
              f"{r['host_bytes'] / MIB:>9.0f} {'yes' if r['device_bytes'] <= budget else 'no':>5} "
              f"{r['peak_rss_bytes'] / MIB:>12.0f} {r['seconds_per_iteration']:>7.2f}  {r.get('tiles', '')}")
    write(args.ppo_out, {"budget_bytes": budget, "results": results})
    png = os.path.splitext(args.ppo_out)[0] + ".png"
    plot_budget(results, budget, png)
    print(f"wrote {args.ppo_out} and {png}")


def plot_budget(results: list[dict], budget: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, over) = plt.subplots(1, 2, figsize=(12, 3.6))
    for system, label in (("cleanrl", "CleanRL-style (PyTorch)"), ("tempo", "Tempo, device tier")):
        rows = [r for r in results if r["system"] == system]
        ax.plot([r["obs"].replace(",", "x") for r in rows], [r["device_bytes"] / MIB for r in rows], "o-",
                label=label)
    ax.axhline(budget / MIB, color="grey", linestyle="--", label="device budget")
    ax.set_yscale("log")
    ax.set_xlabel("observation shape")
    ax.set_ylabel("device memory (MiB)")
    ax.set_title("PPO under a fixed device budget")
    ax.legend()
    largest = [r for r in results if r["system"] == "tempo"][-1]
    launches = [s[0] for s in largest["timeline"]] + [largest["launches"]]
    for k, tier in ((1, "device"), (2, "host")):
        held = [s[k] / MIB for s in largest["timeline"]]
        over.step(launches, held + held[-1:], where="post", label=f"{tier} tier")
    over.axhline(budget / MIB, color="grey", linestyle="--", label="device budget")
    over.set_xlabel("kernel launches")
    over.set_ylabel("MiB held")
    over.set_title(f"Tempo over the run, {largest['obs'].replace(',', 'x')} observations")
    over.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", choices=("reinforce", "ppo", "recompute", "swap-plan"),
                        default=["reinforce", "ppo", "recompute", "swap-plan"])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 4000], help="REINFORCE episode lengths T")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=3, help="REINFORCE iterations per run")
    parser.add_argument("--tiles", type=int, default=10,
                        help="REINFORCE: steps per tile of the learner (0: the compiler chooses, as with no flag)")
    parser.add_argument("--no-checkpoint", dest="checkpoint", action="store_false",
                        help="REINFORCE: no checkpoint (with --tiles 0, the example run with no flag beyond --nstep)")
    parser.add_argument("--backends", nargs="+", default=["numpy"], choices=("numpy", "jax"),
                        help="REINFORCE: the backends to run on")
    parser.add_argument("--obs", nargs="+", default=["3,16,16", "3,32,32", "3,64,64", "3,128,128", "3,256,256"],
                        help="PPO observation shapes")
    parser.add_argument("--ppo-steps", type=int, default=1000, help="PPO episode length T")
    parser.add_argument("--ppo-iterations", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=16, help="PPO hidden width")
    parser.add_argument("--budget", default="256MB", help="PPO device budget")
    parser.add_argument("--quick", action="store_true", help="two iterations per run")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "memory_reinforce.json"))
    parser.add_argument("--ppo-out", default=os.path.join(ROOT, "docs", "results", "memory_ppo_budget.json"))
    parser.add_argument("--recompute-budgets", nargs="+", default=["256MB", "64MB"],
                        help="device budgets of the recomputation experiment")
    parser.add_argument("--recompute-out", default=os.path.join(ROOT, "docs", "results", "memory_recompute.json"))
    parser.add_argument("--plan-obs", nargs="+", default=["3,32,32", "3,64,64", "3,128,128"],
                        help="PPO observation shapes of the swap-plan experiment")
    parser.add_argument("--plan-repeats", type=int, default=2, help="runs of each swap plan, alternated")
    parser.add_argument("--swap-plan-out", default=os.path.join(ROOT, "docs", "results", "memory_swap_plan.json"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child[0])
        if spec.get("experiment") == "recompute":
            recompute_child(spec, args.child[1])
        elif spec.get("experiment") == "swap-plan":
            swap_plan_child(spec, args.child[1])
        else:
            (ppo_child if "system" in spec else child)(spec, args.child[1])
        return
    if "reinforce" in args.experiments:
        reinforce_experiment(args)
    if "ppo" in args.experiments:
        ppo_experiment(args)
    if "recompute" in args.experiments:
        recompute_experiment(args)
    if "swap-plan" in args.experiments:
        swap_plan_experiment(args)


if __name__ == "__main__":
    main()
