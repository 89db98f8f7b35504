"""RL training throughput: Tempo against CleanRL-style torch and PureJaxRL-style JAX (TEMPO §7.3, Fig. 20).

Every system trains the same algorithm (``--algo ppo`` or ``reinforce``) with
the same network, initialisation and hyper-parameters on the same
environment dynamics (``tempo/Synthetic-v0``):

- ``tempo-numpy``, ``tempo-torch``, ``tempo-jax``: ``examples/ppo_fixed_horizon.py`` /
  ``examples/reinforce.py`` themselves, on the NumPy, PyTorch (eager, CPU)
  and JAX backends (on JAX the whole run is one program: a ``lax.scan``
  over the iterations holding acting's ``lax.scan``, launched for the first
  iteration alone and then for ``--tempo-launch-iterations`` iterations at a
  time; its iterations' seconds are each launch's, XLA's compile left out,
  divided evenly among its iterations);
- ``cleanrl``: ``benchmarks/baselines/cleanrl_*.py`` (eager PyTorch, stored
  batch, replayed forward and backward);
- ``purejaxrl``: ``benchmarks/baselines/purejaxrl_{ppo,reinforce}.py`` (one ``jax.jit``-ed
  function per iteration, acting under ``lax.scan``: a launch per iteration);
- ``purejaxrl-whole``: ``benchmarks/baselines/purejaxrl_whole_*.py`` (the
  whole run, every iteration, one ``jax.jit``-ed program: a ``lax.scan`` over
  the updates, as PureJaxRL's own code compiles it; its iterations' seconds
  are the run's divided evenly among them).

The default point is TEMPO's (3x4x4 observations, 512 environments, episodes
of 250 steps, actor and critic MLPs with 2 hidden layers of 64, one update
per batch); ``--sweep`` varies one parameter at a time (episode length,
hidden width, hidden layers, environments) over small points for a 2-core
machine, the default point among them.

Each run is a fresh process whose NumPy (BLAS), torch and XLA use
``--threads`` threads (1 by default: on a shared 2-core machine more threads
contend for the cores and make every system slow and noisy). Reported per
system: compile seconds (Tempo: every pass, analysis, scheduling, AST; JAX:
the ahead-of-time compile), the first iteration's seconds (from the end of
compilation), the steady state, the same in the worker's process CPU
seconds and in its system CPU seconds, the kernel's part of them (read at
the same marks: page faults and the zeroing of fresh memory land there; on
a virtual machine whose guest reports its free pages to the host, memory a
program frees and takes again can come back unbacked and cost several
milliseconds per 2 MB), the speed-up over the slowest system, the peak
RSS, and Tempo's kernel launches per iteration, counted by a wrapper around
the backend's kernels that also times the iterations.

The steady state is a median over several launches of each system:

- Tempo on JAX: the median of the launches after the first of each
  launch's seconds per iteration, ``(--tempo-iterations - 1) /
  --tempo-launch-iterations`` launches of that many iterations each (by
  default 8 launches of 4). A launch's seconds run from the end of the
  previous launch's sinks to the end of its own: its host preparation, the
  device program and its sinks. What the first launches of a run pay while
  the heap grows to its size (at 64 environments one or two of the first
  three launches touch fresh pages, none after) so does not decide the
  figure;
- the per-iteration systems (Tempo on NumPy and torch, CleanRL-style,
  PureJaxRL-style), whose every iteration is a launch of its own: the
  median of the ``--iterations - 1`` (Tempo: ``--tempo-iterations - 1``)
  iterations after the first;
- ``purejaxrl-whole``: its one timed run of ``--iterations`` iterations,
  divided evenly (after an untimed run of the same program).

The JSON lists each launch's seconds per iteration (``launches_s``,
``launches_cpu_s``, ``launches_sys_s``) and iterations
(``launch_iterations``) where the system reports its launches.
``--clock cpu`` makes every timing
read the worker's process CPU seconds instead of wall seconds (steadier when
other processes share the cores; a system whose host work overlaps its
device work counts both). ``--learning-step`` also counts the FLOPs of
Tempo's learning step (everything of an iteration but the acting loop),
times it on JAX and measures this CPU's float32 matrix-product throughput.
A point predicted to run past
``--max-seconds`` (linearly in the swept parameter, from the nearest
measured point) is skipped, and a run that goes past it is stopped; both
are reported as skipped.

    .venv/bin/python benchmarks/rl_train.py                          # PPO at the default point
    .venv/bin/python benchmarks/rl_train.py --algo ppo reinforce --sweep steps hidden layers envs
    .venv/bin/python benchmarks/rl_train.py --sweep steps --points 50 100 250 500
    .venv/bin/python benchmarks/rl_train.py --algo ppo reinforce --clock cpu --learning-step
    .venv/bin/python benchmarks/rl_train.py --envs 64 --systems tempo-jax purejaxrl purejaxrl-whole --profile
    .venv/bin/python benchmarks/rl_train.py --quick                  # a smoke test, seconds
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = os.path.join(ROOT, "benchmarks", "baselines")
TEMPO_BACKENDS = {"tempo-numpy": "numpy", "tempo-torch": "torch", "tempo-jax": "jax"}  # system -> backend
BASELINES_MODULES = {"cleanrl": "cleanrl", "purejaxrl": "purejaxrl",  # system -> its baselines' module prefix
                     "purejaxrl-whole": "purejaxrl_whole"}
SYSTEMS = (*TEMPO_BACKENDS, *BASELINES_MODULES)
LABELS = {"tempo-numpy": "Tempo (NumPy)", "tempo-torch": "Tempo (torch)", "tempo-jax": "Tempo (JAX)",
          "cleanrl": "CleanRL-style (torch)", "purejaxrl": "PureJaxRL-style (JAX)",
          "purejaxrl-whole": "PureJaxRL whole-run"}
ALGOS = ("ppo", "reinforce")


@dataclasses.dataclass(frozen=True)
class Point:
    """One configuration of the environment, the networks and the batch."""

    steps: int = 250
    """episode length: timesteps per iteration"""
    envs: int = 512
    """environments (episodes per iteration)"""
    hidden: int = 64
    """width of the hidden layers"""
    layers: int = 2
    """hidden layers of each network"""
    obs_shape: str = "3,4,4"
    """observation shape"""
    epochs: int = 1
    """PPO's updates per batch of episodes"""


SWEEPS = {  # swept field -> default points, for a 2-core machine (Fig. 20 goes further)
    "steps": (50, 125, 250, 500),
    "hidden": (16, 64, 256),
    "layers": (1, 2, 4),
    "envs": (64, 256, 512, 1024),
}
QUICK_POINT = Point(steps=8, envs=4, hidden=8, layers=2)
QUICK_SWEEPS = {"steps": (4, 8), "hidden": (4, 8), "layers": (1, 2), "envs": (2, 4)}


# ----- measuring one system at one point (in a worker process) -----
class LaunchProbe:
    """A backend wrapper: counts kernel launches per iteration and notes when each iteration's last one ended.

    A launch belongs to the iteration ``env["i"] // every`` of its point
    (``every``: PPO's updates per batch), or to ``None`` (run once, outside
    the iterations). A loop the backend runs whole (``device_loop``) is one
    launch of the iteration of the kernel launch after it; a loop over the
    iterations run whole (one with nested loops) is waited for, and its
    iterations end evenly up to the last sink call after the launch, from
    the end of the previous launch's last iteration (the first launch: from
    its start), XLA's compile left out: the host work between two launches
    (the sinks of one, the next one's preparation) is the next launch's
    (``chunks``: start, compile seconds, end and iterations of each launch;
    the marks in wall, process CPU and system CPU seconds). Everything but
    ``kernel`` and ``device_loop`` is the wrapped backend's.
    """

    def __init__(self, backend, every: int = 1):
        self.backend, self.every = backend, every
        self.launches: collections.Counter = collections.Counter()
        self.ends: dict[int, float] = {}
        self.pending = 0  # compiled loops launched since the latest kernel launch
        self.ends_cpu: dict[int, float] = {}  # the same marks in process CPU seconds
        self.ends_sys: dict[int, float] = {}  # and in system CPU seconds (the kernel's, page faults included)
        self.chunks: list[tuple[tuple, tuple, tuple, int]] = []

    def iteration_ends(self, iterations: int) -> tuple[list[float], list[float], list[float]]:
        """When each of the first ``iterations`` iterations ended, in wall, process CPU and system CPU seconds."""
        clocks = (self.ends, self.ends_cpu, self.ends_sys)
        outs, done, previous = [dict(marks) for marks in clocks], 0, None
        for start, compile_s, end, trips in self.chunks:
            keys = [(done + k) // self.every for k in range(trips)]
            lasts = []
            for clock, (marks, out) in enumerate(zip(clocks, outs)):
                begin = (start if previous is None else previous)[clock] + compile_s[clock]
                last = max([end[clock]] + [marks[k] for k in keys if k in marks])
                for k, key in enumerate(keys):
                    out[key] = begin + (last - begin) * (k + 1) / trips
                lasts.append(last)
            done, previous = done + trips, lasts
        return tuple([out[k] for k in range(iterations)] for out in outs)

    def device_loop(self, plan, sdg):
        compiled = self.backend.device_loop(plan, sdg)
        return None if compiled is None else ProbedLoop(compiled, self)

    def kernel(self, op, **options):
        kernel, launches, ends, every, clock = (self.backend.kernel(op, **options), self.launches, self.ends,
                                                self.every, time.perf_counter)

        def probed(inputs, env, point):
            out = kernel(inputs, env, point)
            i = env.get("i")
            key = None if i is None else i // every
            launches[key] += 1 + self.pending
            self.pending = 0
            if key is not None:
                ends[key], self.ends_cpu[key], self.ends_sys[key] = clock(), time.process_time(), system_seconds()
            return out

        return probed

    def __getattr__(self, name):
        return getattr(self.backend, name)


def system_seconds() -> float:
    """The process's system CPU seconds (the kernel's work for it: page faults, zeroing fresh memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def clock_marks() -> tuple[float, float, float]:
    """Now in wall, process CPU and system CPU seconds."""
    return time.perf_counter(), time.process_time(), system_seconds()


def jax_ready(value):
    import jax

    return jax.block_until_ready(value)


class ProbedLoop:
    """A compiled device loop whose launches a :class:`LaunchProbe` counts."""

    def __init__(self, compiled, probe: LaunchProbe):
        self.compiled, self.probe = compiled, probe

    def __call__(self, *args):
        if not getattr(self.compiled, "nested", None):
            out = self.compiled(*args)
            self.probe.pending += 1
            return out
        start, compiled = clock_marks(), self.compiled.compile_seconds
        out = jax_ready(self.compiled(*args))
        compile_s = (*(b - a for a, b in zip(compiled, self.compiled.compile_seconds)), 0.0)  # its system seconds: in
        self.probe.chunks.append((start, compile_s, clock_marks(), args[1]))
        return out

    def __getattr__(self, name):
        return getattr(self.compiled, name)


# the example file each program name trains with (PPO here is the paper's fixed-horizon formulation)
EXAMPLE_FILES = {"ppo": "ppo_fixed_horizon", "reinforce": "reinforce", "a2c": "a2c"}


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{EXAMPLE_FILES.get(name, name)}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_tempo(backend: str, algo: str, point: Point, iterations: int, seed: int, profile: bool = False,
              options: dict | None = None, launch_iterations: int | None = None) -> dict:
    """Train with the example program; its compile is probed for the stage timings and the backend wrapped
    (``profile``: its run is profiled too, :meth:`tempo.api.compile.Program.profile`; ``options``: more of
    the example's ``Args``, such as ``{"nstep": 8, "tiles": 16}``; ``launch_iterations``: the most
    iterations of a launch of the device loop over iterations, :attr:`DeviceLoop.chunk`, None: its default).

    The program runs ``iterations + 1`` iterations and the last is left out:
    nothing reads the parameters after the last update, so the last
    iteration acts and reports but does not learn (with ``iterations - 1``
    a multiple of ``launch_iterations``, it is a launch of its own).
    """
    from tempo.api import compile as compile_mod
    from tempo.runtime.device_loops import DeviceLoop
    from tempo.runtime.profile import Profiler, loop_dim

    module = _example(algo)
    every = point.epochs if algo == "ppo" else 1
    fields = dict(env="tempo/Synthetic-v0", impl="tensor", obs_shape=point.obs_shape, batch=point.envs,
                  steps=point.steps, hidden=point.hidden, layers=point.layers, iterations=iterations + 1, seed=seed,
                  backend=backend, **(options or {}))
    if algo == "ppo":
        fields["epochs"] = point.epochs
    programs, compile_program = [], compile_mod.compile_program

    def probed(*args, **kwargs):
        program = compile_program(*args, **kwargs)
        if isinstance(program.backend, LaunchProbe):  # compile_program's own retry (without early tiles)
            return program
        program.backend = LaunchProbe(program.backend, every)
        if profile:
            profiler = program.profiler = Profiler(loop_dim(program.sdg, program.plan_for().main_loop))
            run = program.run
            program.run = lambda bounds, stores="auto": run(bounds, stores, profiler=profiler)
        programs.append((program, *clock_marks()))
        return program

    compile_mod.compile_program, chunk = probed, DeviceLoop.chunk
    DeviceLoop.chunk = launch_iterations or chunk
    try:
        summary = module.main(module.Args(**fields))
    finally:
        compile_mod.compile_program, DeviceLoop.chunk = compile_program, chunk
    (program, compiled_at, compiled_cpu, compiled_sys), = programs
    probe = program.backend
    ends, ends_cpu, ends_sys = probe.iteration_ends(iterations)
    stages = {k: v for k, v in program.timings.items() if k != "run"}
    per_iteration = [probe.launches[k] for k in range(iterations)]
    profiled = {}
    if profile:
        found = program.profiler.finish()
        profiled = {"profile": {kind: list(row) for kind, row in found.per_iteration().items()},
                    "profiled_launches": found.launches(), "profiled_host_us": found.host_us(),
                    "profiled_run_launches": found.total("kernel") + found.total("device loop"),
                    "profile_table": str(found)}
    return {**profiled, "returns": summary["returns"][:iterations], "losses": [], "compile_s": sum(stages.values()),
            "compile_stages": stages, "start": compiled_at, "ends": ends, "start_cpu": compiled_cpu,
            "ends_cpu": ends_cpu, "start_sys": compiled_sys, "ends_sys": ends_sys,
            "launches_per_iteration": per_iteration, "launch_iterations": [chunk[3] for chunk in probe.chunks],
            "launches_outside_iterations": probe.launches[None], "nodes": len(program.sdg.nodes),
            "device_loops": program.code.count("as one device launch")}


def _flops(op, inputs, out) -> int:
    """Floating-point operations of one op: ``2mkn`` per matrix product, else one per output element."""
    import numpy as np

    from tempo.ir import ops

    if isinstance(op, ops.MatMulOp):
        return 2 * np.size(out[0]) * np.shape(inputs[0])[-1]
    if isinstance(op, ops.BatchContractOp):  # the sum over the batch axes of a @ b
        return 2 * np.size(inputs[0]) * np.shape(inputs[1])[-1]
    return sum(np.size(x) for x in out)


def matmul_peak(n: int = 2048, repeats: int = 5) -> dict:
    """This CPU's float32 matrix-product throughput in GFLOP/s (an ``n x n`` product, best of ``repeats``),
    through NumPy's BLAS and through XLA, with the worker's thread settings."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    x, y, product = jnp.asarray(a), jnp.asarray(b), jax.jit(jnp.matmul)
    product(x, y).block_until_ready()

    def best(fn, clock) -> float:
        seconds = []
        for _ in range(repeats):
            start = clock()
            fn()
            seconds.append(clock() - start)
        return 2 * n ** 3 / min(seconds) / 1e9

    def xla():
        product(x, y).block_until_ready()

    return {"n": n, "numpy_gflops": best(lambda: a @ b, time.perf_counter), "xla_gflops": best(xla, time.perf_counter),
            "numpy_gflops_per_cpu_s": best(lambda: a @ b, time.process_time),
            "xla_gflops_per_cpu_s": best(xla, time.process_time)}


def learning_step(algo: str, point: Point, seed: int, iterations: int = 3) -> dict:
    """The learning step's FLOPs and seconds per iteration: every launch of an iteration but the acting
    loop's (launches at a point of ``t``, or a compiled loop). FLOPs are counted on the NumPy kernels
    (:func:`_flops`); seconds on the JAX backend, each launch waited for (wall and process CPU seconds)."""
    import jax

    from tempo.api import compile as compile_mod
    from tempo.ir import ops
    from tempo.runtime.backends import numpy as numpy_backend

    module = _example(algo)
    fields = dict(env="tempo/Synthetic-v0", impl="tensor", obs_shape=point.obs_shape, batch=point.envs,
                  steps=point.steps, hidden=point.hidden, layers=point.layers, iterations=iterations + 1, seed=seed)
    if algo == "ppo":
        fields["epochs"] = point.epochs
    last = iterations - 1
    flops = collections.Counter()
    saved = dict(numpy_backend.KERNELS)

    def counting(factory):
        def make(op):
            kernel = factory(op)

            def run(inputs, env, where):
                out = kernel(inputs, env, where)
                if env.get("i") == last:
                    flops["acting" if "t" in env else "learning"] += _flops(op, inputs, out)
                return out

            return run

        return make

    numpy_backend.KERNELS.update({t: counting(f) for t, f in saved.items() if t is not ops.FusedOp})
    try:
        module.main(module.Args(backend="numpy", **fields))
    finally:
        numpy_backend.KERNELS.clear()
        numpy_backend.KERNELS.update(saved)

    seconds = collections.Counter()

    class Waiting(LaunchProbe):
        def kernel(self, op, **options):
            kernel = self.backend.kernel(op, **options)

            def waited(inputs, env, where):
                wall, cpu = time.perf_counter(), time.process_time()
                out = jax.block_until_ready(kernel(inputs, env, where))
                if env.get("i") == last and "t" not in env:
                    seconds["wall"] += time.perf_counter() - wall
                    seconds["cpu"] += time.process_time() - cpu
                return out

            return waited

    compile_program = compile_mod.compile_program

    def probed(*args, **kwargs):
        program = compile_program(*args, **kwargs)
        program.backend = Waiting(program.backend)
        return program

    compile_mod.compile_program = probed
    try:
        module.main(module.Args(backend="jax", **fields))
    finally:
        compile_mod.compile_program = compile_program
    return {"acting_flops": flops["acting"], "learning_flops": flops["learning"], "learning_s": seconds["wall"],
            "learning_cpu_s": seconds["cpu"], "matmul_peak": matmul_peak()}


def run_baseline(system: str, algo: str, point: Point, iterations: int, seed: int) -> dict:
    sys.path.insert(0, BASELINES)
    module = importlib.import_module(f"{BASELINES_MODULES[system]}_{algo}")
    fields = dict(seed=seed, iterations=iterations, envs=point.envs, steps=point.steps, obs_shape=point.obs_shape,
                  hidden=point.hidden, layers=point.layers)
    if algo == "ppo":
        fields["epochs"] = point.epochs
    return module.main(module.Args(**fields))


def per_launch(seconds: list[float], trips: list[int]) -> list[float]:
    """Each launch's seconds per iteration, from the iterations' ``seconds`` (``trips``: each launch's
    iterations, in order), over those of its iterations that ``seconds`` holds (a launch of the
    iterations after them, the last one's that does not learn, is left out)."""
    out, done = [], 0
    for n in trips:
        timed = seconds[done:done + n]
        if not timed:
            break
        out.append(sum(timed) / len(timed))
        done += n
    return out


def measure(system: str, algo: str, point: Point, iterations: int, seed: int, cpu_at: dict,
            profile: bool = False, options: dict | None = None, launch_iterations: int | None = None) -> dict:
    """One training run: compile, first iteration and steady-state seconds (wall, and process and system
    CPU from ``cpu_at``: each mark's CPU seconds, process and system), and what the system reports
    (``profile``: Tempo's profile; ``options``, ``launch_iterations``: Tempo's, see :func:`run_tempo`).
    The steady state is the median of the seconds per iteration of the launches after the first where
    the system reports its launches (Tempo's device loop), else of the iterations after the first."""
    run = ((lambda *a: run_tempo(TEMPO_BACKENDS[system], *a, profile=profile, options=options,
                                 launch_iterations=launch_iterations))
           if system in TEMPO_BACKENDS
           else lambda *a: run_baseline(system, *a))
    out = run(algo, point, iterations, seed)
    trips = out.pop("launch_iterations", None)  # each launch's iterations, where the system reports them
    start, ends = out.pop("start"), out.pop("ends")
    own = "ends_cpu" in out  # a system's own CPU marks
    cpu_marks = [out.pop("start_cpu"), *out.pop("ends_cpu")] if own else [cpu_at[m][0] for m in (start, *ends)]
    sys_marks = [out.pop("start_sys"), *out.pop("ends_sys")] if own else [cpu_at[m][1] for m in (start, *ends)]
    for suffix, marks in (("", [start, *ends]), ("_cpu", cpu_marks), ("_sys", sys_marks)):
        seconds = [b - a for a, b in zip(marks, marks[1:])]
        if min(seconds) < -1e-9:
            raise RuntimeError(f"{system}: its {suffix or '_wall'} clock marks go backwards: {marks}")
        seconds = [max(x, 0.0) for x in seconds]  # the marks a launch's iterations share differ by rounding
        launches = per_launch(seconds, trips) if trips else seconds
        out.update({f"first_iteration{suffix}_s": seconds[0], f"iterations{suffix}_s": seconds,
                    f"iteration{suffix}_s": statistics.median(launches[1:]) if len(launches) > 1 else None})
        if trips:
            out[f"launches{suffix}_s"] = launches
    if trips:
        out["launch_iterations"] = trips[:len(per_launch(seconds, trips))]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def marking_clock(read_wall, read_cpu, cpu_at: dict):
    """A ``time.perf_counter`` that notes the process and system CPU seconds at each reading
    (``cpu_at[reading]``): every system marks its iterations with ``time.perf_counter``, so every clock
    sees the same marks."""
    def clock() -> float:
        now = read_wall()
        cpu_at[now] = (read_cpu(), system_seconds())
        return now

    return clock


def worker(spec: dict, out_path: str) -> None:
    if spec["system"] == "learning-step":
        result = learning_step(spec["algo"], Point(**spec["point"]), spec["seed"])
    else:
        cpu_at: dict = {}
        wall = time.process_time if spec.get("clock") == "cpu" else time.perf_counter  # what every timer reads
        time.perf_counter = marking_clock(wall, time.process_time, cpu_at)
        result = measure(spec["system"], spec["algo"], Point(**spec["point"]), spec["iterations"], spec["seed"],
                         cpu_at, spec.get("profile", False), launch_iterations=spec.get("launch_iterations"))
    with open(out_path, "w") as f:
        json.dump(result, f)


# ----- running the workers -----
def thread_env(threads: int) -> dict:
    """The environment of a worker whose NumPy (BLAS), torch and XLA use ``threads`` threads (0: their defaults).

    Torch's large allocations go on transparent huge pages
    (``THP_MEM_ALLOC_ENABLE=1``): a fresh 32 MB buffer otherwise costs more
    in page faults than the op that fills it (a ``(250, 512, 64)`` float32
    torch multiply takes 17 ms, 5.5 ms on huge pages).

    Memory a worker frees through malloc (XLA's and NumPy's buffers) stays
    in it: every buffer comes from malloc's main heap
    (``glibc.malloc.mmap_max=0``: none from a mapping of its own that
    ``free`` unmaps; ``glibc.malloc.arena_max=1``: every thread allocates
    there, where another thread's arena is made of 64 MB heaps and maps a
    larger buffer apart all the same), and the heap is never shrunk
    (``glibc.malloc.trim_threshold`` at its largest). XLA takes a launch's
    temporary buffers (about 200 MB at the default point) from malloc on
    its own thread and frees them after it; unmapped, they come back as
    fresh pages that the kernel zeroes at their first touch in the next
    launch, system CPU seconds that vary with what else the machine's
    kernel does (0.006-0.019 s per iteration of Tempo's PPO at hidden
    width 16 on the 2-core machine shared with other jobs; none with the
    heap kept). The heap is not advised onto huge pages
    (``glibc.malloc.hugetlb``: with one arena for every thread that
    advice cost Tempo's PPO 0.12 system CPU seconds per iteration at the
    default point), nor are NumPy's arrays in it (``NUMPY_MADVISE_HUGEPAGE=0``:
    with the advice, 2 of 4 runs of Tempo's PPO at hidden width 16 spent
    0.006-0.008 system seconds per iteration, none of 3 without). Every
    system runs so.
    """
    env = dict(os.environ)
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    env.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    env.setdefault("GLIBC_TUNABLES", f"glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1:"
                                     f"glibc.malloc.trim_threshold={2 ** 64 - 1}")
    if threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(threads)
        env["PJRT_NPROC"] = str(threads)  # the size of XLA's CPU client's pool (one thread per core otherwise)
        xla = f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"  # one op on several threads
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla}".strip()
    return env


def run_point(system: str, algo: str, point: Point, iterations: int, seed: int, timeout: float,
              threads: int, clock: str = "wall", profile: bool = False,
              launch_iterations: int | None = None) -> dict:
    """``measure`` in a fresh process; ``{"skipped": why}`` if it runs past ``timeout`` seconds or fails."""
    spec = {"system": system, "algo": algo, "point": dataclasses.asdict(point), "iterations": iterations,
            "seed": seed, "clock": clock, "profile": profile, "launch_iterations": launch_iterations}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec), out],
                                  capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=thread_env(threads))
        except subprocess.TimeoutExpired:
            return {"skipped": f"ran past --max-seconds ({timeout:.0f} s)"}
        if done.returncode != 0:
            print(f"{system} {algo} at {point} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
            return {"skipped": f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"}
        with open(out) as f:
            result = json.load(f)
    result["wall_s"] = time.perf_counter() - started
    return result


def predicted_seconds(measured: list[tuple[int, dict]], value: int) -> float | None:
    """The wall seconds of a run at ``value`` of the swept field, linear from the nearest measured point below it
    (else the nearest above); None if nothing was measured."""
    runs = [(v, r) for v, r in measured if "skipped" not in r]
    if not runs:
        return None
    below = [(v, r) for v, r in runs if v <= value]
    v, r = max(below, key=lambda x: x[0]) if below else min(runs, key=lambda x: x[0])
    return r["wall_s"] * value / v


# ----- reporting -----
def speedups(systems: dict) -> dict:
    times = {s: r["iteration_s"] for s, r in systems.items() if r.get("iteration_s")}
    slowest = max(times.values(), default=None)
    return {s: slowest / t for s, t in times.items()}


def tempo_ratios(systems: dict) -> list[str]:
    """Lines saying how many times faster Tempo's fastest backend is than each PureJaxRL-style loop,
    in wall and in process CPU seconds per steady-state iteration."""
    tempo = {s: r for s, r in systems.items() if s in TEMPO_BACKENDS and r.get("iteration_s")}
    if not tempo:
        return []
    best = min(tempo, key=lambda s: tempo[s]["iteration_s"])
    lines = []
    for other in ("purejaxrl", "purejaxrl-whole"):
        r = systems.get(other, {})
        if r.get("iteration_s") and r.get("iteration_cpu_s"):
            wall, cpu = (r[k] / tempo[best][k] for k in ("iteration_s", "iteration_cpu_s"))
            lines.append(f"{LABELS[best]} against {LABELS[other]}: {wall:.2f}x wall, {cpu:.2f}x process CPU")
    return lines


def print_table(algo: str, title: str, systems: dict) -> None:
    print(f"\n{algo.upper()} {title}")
    print(f"{'system':<24} {'compile s':>10} {'first s':>9} {'s/iter':>9} {'CPU s/iter':>11} {'sys s/iter':>11} "
          f"{'speed-up':>9} {'launches/iter':>14} {'peak MB':>8}")
    ups = speedups(systems)
    for system, r in systems.items():
        if "skipped" in r:
            print(f"{LABELS[system]:<24} skipped: {r['skipped']}")
            continue
        launches = r.get("launches_per_iteration")
        steady, cpu, kernel = (r.get(k) if r.get(k) is not None else float("nan")
                               for k in ("iteration_s", "iteration_cpu_s", "iteration_sys_s"))
        print(f"{LABELS[system]:<24} {r['compile_s']:>10.2f} {r['first_iteration_s']:>9.3f} "
              f"{steady:>9.3f} {cpu:>11.3f} {kernel:>11.3f} {ups.get(system, float('nan')):>8.2f}x "
              f"{launches[-1] if launches else '-':>14} {r['peak_rss_mb']:>8.0f}")
    for line in tempo_ratios(systems):
        print(line)
    tempo = next((systems[s] for s in TEMPO_BACKENDS if "compile_stages" in systems.get(s, {})), None)
    if tempo is not None:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in tempo["compile_stages"].items())
        print(f"Tempo compile stages (s): {stages}")


def print_learning_step(step: dict) -> None:
    if "skipped" in step:
        print(f"learning step: skipped: {step['skipped']}")
        return
    peak = step["matmul_peak"]
    rate, cpu_rate = step["learning_flops"] / step["learning_s"] / 1e9, step["learning_flops"] / step["learning_cpu_s"] / 1e9
    print(f"Tempo's learning step (JAX, every launch waited for): {step['learning_flops'] / 1e9:.2f} GFLOP "
          f"(acting {step['acting_flops'] / 1e9:.2f}) in {step['learning_s']:.3f} s ({step['learning_cpu_s']:.3f} CPU s): "
          f"{rate:.1f} GFLOP/s ({cpu_rate:.1f} per CPU second); matmul peak ({peak['n']}^2 float32): NumPy "
          f"{peak['numpy_gflops']:.1f} ({peak['numpy_gflops_per_cpu_s']:.1f} per CPU second), XLA "
          f"{peak['xla_gflops']:.1f} ({peak['xla_gflops_per_cpu_s']:.1f}) GFLOP/s")


def plot(results: list[dict], path: str) -> None:
    """One panel per (algorithm, sweep): seconds per iteration against the swept value, a line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tempo.files import write_bytes_atomic

    panels = collections.OrderedDict()
    for row in results:
        if row["sweep"] != "default":
            panels.setdefault((row["algo"], row["sweep"]), []).append(row)
    if not panels:
        panels = collections.OrderedDict(((row["algo"], "default"), [row]) for row in results)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, ((algo, sweep), rows) in zip(axes[0], panels.items()):
        skipped = []
        for k, system in enumerate(SYSTEMS):
            runs = [(row["value"], row["systems"][system]) for row in rows if system in row["systems"]]
            pts = [(v, r["iteration_s"]) for v, r in runs if r.get("iteration_s")]
            skipped += [f"{system} at {v}" for v, r in runs if "skipped" in r]
            if sweep == "default" and pts:
                ax.bar([k], [pts[0][1]], label=LABELS[system])
            elif pts:
                ax.plot(*zip(*pts), marker="o", label=LABELS[system])
        ax.set_ylabel("seconds per iteration")
        ax.set_title(f"{algo.upper()}: {sweep}" + (f"\nskipped: {', '.join(skipped)}" if skipped else ""),
                     fontsize=9)
        if sweep == "default":
            ax.set_xticks([])
        else:
            values = [row["value"] for row in rows]
            ax.set_yscale("log")
            ax.set_xscale("log")
            ax.set_xticks(values, [str(v) for v in values])
            ax.minorticks_off()
            ax.set_xlabel(sweep)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())


def versions() -> dict:
    out = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for name in ("numpy", "torch", "jax", "tempo"):
        try:
            out[name] = importlib.metadata.version(name if name != "tempo" else "tempo-dl")
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["load_average"] = os.getloadavg()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", nargs="+", default=["ppo"], choices=ALGOS, help="algorithms to train (default: ppo)")
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, help="systems to time (all)")
    p.add_argument("--sweep", nargs="*", default=[], choices=list(SWEEPS),
                   help="parameters to vary one at a time from the default point, over "
                        + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in SWEEPS.items()))
    p.add_argument("--points", nargs="+", type=int, help="the values of the one --sweep")
    for f in dataclasses.fields(Point):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None,
                       help=f"the default point's {f.name} (default {f.default}, --quick "
                            f"{getattr(QUICK_POINT, f.name)})")
    p.add_argument("--iterations", type=int, default=9,
                   help="iterations of each baseline run; the first is reported apart, the median of the others")
    p.add_argument("--tempo-iterations", type=int, default=33,
                   help="iterations of each Tempo run (it runs one more, which does not learn, and leaves it out): "
                        "the first, then launches of --tempo-launch-iterations")
    p.add_argument("--tempo-launch-iterations", type=int, default=4,
                   help="the most iterations of one launch of Tempo's device loop over iterations; the steady state "
                        "is the median of the launches after the first (make --tempo-iterations minus one a "
                        "multiple of it)")
    p.add_argument("--max-seconds", type=float, default=600.0,
                   help="skip a run predicted to take longer, stop one that does")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of NumPy's BLAS, torch and XLA in every run (0: the libraries' defaults)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="what every timing reads: wall seconds, or the worker process's CPU seconds (user + system, "
                        "all threads: steadier when other processes share the cores)")
    p.add_argument("--learning-step", action="store_true",
                   help="also count the FLOPs of Tempo's learning step, time it on JAX and measure this CPU's "
                        "matrix-product peak")
    p.add_argument("--profile", action="store_true",
                   help="also run each Tempo system once more under program.profile() and report its launches "
                        "and host microseconds per iteration by statement kind (that run is not timed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes and 3 iterations: a smoke test")
    p.add_argument("--out", default="benchmarks/results/rl_train.json")
    p.add_argument("--plot", default=None, help="PNG of the sweeps (default: --out with .png)")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(json.loads(args.worker[0]), args.worker[1])
    if args.points and len(args.sweep) != 1:
        p.error("--points needs exactly one --sweep")
    base = QUICK_POINT if args.quick else Point()
    base = dataclasses.replace(base, **{f.name: getattr(args, f.name) for f in dataclasses.fields(Point)
                                        if getattr(args, f.name) is not None})
    sweeps = QUICK_SWEEPS if args.quick else SWEEPS
    iterations = {s: 3 if args.quick else args.tempo_iterations if s in TEMPO_BACKENDS else args.iterations
                  for s in SYSTEMS}
    per_launch_iterations = 2 if args.quick else args.tempo_launch_iterations
    if min(iterations.values()) < 2:
        p.error("--iterations and --tempo-iterations must be at least 2: the first iteration is reported apart")

    def timed(s, algo, point):
        """``s`` at ``point``, and with --profile a profiled run of a Tempo system beside it."""
        out = run_point(s, algo, point, iterations[s], args.seed, args.max_seconds, args.threads, args.clock,
                        launch_iterations=per_launch_iterations)
        if args.profile and s in TEMPO_BACKENDS and "skipped" not in out:
            profiled = run_point(s, algo, point, iterations[s], args.seed, args.max_seconds, args.threads,
                                 profile=True, launch_iterations=per_launch_iterations)
            out.update({k: v for k, v in profiled.items() if k.startswith("profile")})
            print(f"{LABELS[s]} at {point}:\n{profiled.get('profile_table', profiled.get('skipped'))}")
        return out

    results = []
    for algo in args.algo:
        default = {s: timed(s, algo, base) for s in args.systems}
        results.append({"algo": algo, "sweep": "default", "value": None, "point": dataclasses.asdict(base),
                        "systems": default})
        print_table(algo, f"default point {base}", default)
        if args.learning_step:
            results[-1]["learning_step"] = step = run_point("learning-step", algo, base, 0, args.seed,
                                                            args.max_seconds, args.threads)
            print_learning_step(step)
        for sweep in args.sweep:
            measured = {s: [(getattr(base, sweep), default[s])] for s in args.systems}
            for value in sorted({*(args.points or sweeps[sweep]), getattr(base, sweep)}):
                point = dataclasses.replace(base, **{sweep: value})
                row = {}
                for s in args.systems:
                    guess = predicted_seconds(measured[s], value)
                    if point == base:
                        row[s] = default[s]  # the default point, measured above
                    elif guess is not None and guess > args.max_seconds:
                        row[s] = {"skipped": f"predicted {guess:.0f} s > --max-seconds ({args.max_seconds:.0f} s)"}
                    else:
                        row[s] = timed(s, algo, point)
                    if point != base:
                        measured[s].append((value, row[s]))
                results.append({"algo": algo, "sweep": sweep, "value": value, "point": dataclasses.asdict(point),
                                "systems": row})
                print_table(algo, f"{sweep}={value}", row)
    for row in results:
        for system, up in speedups(row["systems"]).items():
            row["systems"][system]["speedup_over_slowest"] = up

    from tempo.files import write_json_atomic

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json_atomic(args.out, {"config": {k: v for k, v in vars(args).items() if k != "worker"},
                                 "iterations": iterations, "versions": versions(),
                                 "note": "steady state = median over the launches after the first of each "
                                         "launch's seconds per iteration where a system lists its launches "
                                         "(launch_iterations), else median seconds of the iterations after "
                                         "the first; the cores may be shared with other processes",
                                 "results": results})
    plot_path = args.plot or os.path.splitext(args.out)[0] + ".png"
    plot(results, plot_path)
    print(f"\nwrote {args.out} and {plot_path}")


if __name__ == "__main__":
    main()
