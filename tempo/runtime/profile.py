"""Launch and host-work accounting by statement kind (``program.profile(bounds)``).

A profiled run binds timing wrappers in place of the generated code's
names (:mod:`tempo.runtime.codegen`): kernels, device loops, tensor stores,
callbacks; its source evaluates every ``if`` and ``while`` condition
through :meth:`Profiler.condition` and marks the end of each iteration of
the main loop. Each call is counted and its host seconds (the time until
the call returns: a JAX or CUDA kernel's dispatch, not its device work)
are added to its kind at the current iteration of the main loop (None:
outside it). The kinds:

- ``kernel``: a kernel launch (a fused island or one op);
- ``device loop``: a loop launched as one device program, its host work
  (the per-iteration values it prepares, the write-back) included; where
  the main loop itself runs as one (the whole run on the device), each
  launch and its seconds (waiting for the results its sinks read included,
  XLA's compile left out: ``device compile``, outside the loop) are shared
  evenly among the iterations it ran;
- ``store read`` / ``store write``: reads and writes of tensor stores by the
  generated code (merges are one of each);
- ``free``: frees, evictions and loads of points, and the points no later
  iteration reads, freed after each iteration;
- ``host condition``: an ``if`` or loop condition evaluated on the host;
- ``callback``: a sink, a checkpoint or a ``stop_when`` check;
- ``host function``: any other user function (a gymnasium environment).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from tempo.ir.ops import STOP_LABEL, UDFOp
from tempo.schedule import ast

KINDS = ("kernel", "device loop", "store read", "store write", "free", "host condition", "callback",
         "host function")
CALLBACK_LABELS = ("sink", "checkpoint", STOP_LABEL)


def loop_dim(sdg, loop) -> str:
    """The name of the dim ``loop`` (a schedule loop) iterates over: its counter where no statement says."""
    for ex in ast.statements(loop.body):
        for d, p in zip(sdg.nodes[ex.node_id].domain, ex.point):
            if p.is_symbol and p.name == loop.var:
                return d.name
    return loop.var


def kind_of(op) -> str:
    """The profile kind of launching ``op``."""
    if isinstance(op, UDFOp):
        return "callback" if op.label in CALLBACK_LABELS else "host function"
    return "kernel"


@dataclass
class Profile:
    """One run's counts and host seconds per statement kind: ``iterations[k][kind] = (count, seconds)``
    for the k-th iteration of the main loop, ``outside`` for what runs outside it, ``wall`` the wall
    seconds of each iteration."""

    loop: str | None
    iterations: list[dict[str, tuple[int, float]]] = field(default_factory=list)
    outside: dict[str, tuple[int, float]] = field(default_factory=dict)
    wall: list[float] = field(default_factory=list)

    def per_iteration(self) -> dict[str, tuple[float, float]]:
        """kind -> (count, host microseconds) per steady-state iteration: the median over the
        iterations after the first (over all of them when there is one)."""
        steady = self.iterations[1:] or self.iterations
        out = {}
        for kind in KINDS:
            counts = [it.get(kind, (0, 0.0)) for it in steady]
            if any(c for c, _ in counts):
                out[kind] = (statistics.median(c for c, _ in counts), statistics.median(s for _, s in counts) * 1e6)
        return out

    def launches(self) -> float:
        """Kernel launches and device-loop launches per steady-state iteration."""
        rows = self.per_iteration()
        return sum(rows.get(k, (0, 0.0))[0] for k in ("kernel", "device loop"))

    def host_us(self) -> float:
        """Host microseconds per steady-state iteration, all kinds together."""
        return sum(us for _, us in self.per_iteration().values())

    def __str__(self) -> str:
        if not self.iterations:
            rows = {k: (c, s * 1e6) for k, (c, s) in self.outside.items()}
            title = "the whole run (no loop over iterations)"
        else:
            rows = self.per_iteration()
            wall = statistics.median(self.wall[1:] or self.wall) * 1e6
            title = (f"per iteration of the loop over {self.loop} (median of {max(len(self.iterations) - 1, 1)}; "
                     f"wall {wall:.0f} us)")
        lines = [f"profile: {title}", f"{'kind':<16} {'count':>9} {'host us':>11}"]
        lines += [f"{kind:<16} {_count(count):>9} {us:>11.0f}" for kind, (count, us) in rows.items()]
        lines.append(f"{'total':<16} {_count(sum(c for c, _ in rows.values())):>9} "
                     f"{sum(us for _, us in rows.values()):>11.0f}")
        if self.iterations and self.outside:
            outside = ", ".join(f"{kind} {count} ({seconds * 1e6:.0f} us)" for kind, (count, seconds)
                                in self.outside.items())
            lines.append(f"outside the loop, in all: {outside}")
        return "\n".join(lines)

    def total(self, kind: str) -> int:
        """How many statements of ``kind`` the whole run executed."""
        return sum(part.get(kind, (0, 0.0))[0] for part in (*self.iterations, self.outside))


def _count(count: float) -> str:
    return f"{count:.0f}" if float(count).is_integer() else f"{count:.2f}"


class Profiler:
    """Collects a :class:`Profile`: wraps the names the generated code calls."""

    def __init__(self, loop: str | None):
        self.profile = Profile(loop)
        self.current = self.profile.outside
        self.started = time.perf_counter()

    def add(self, kind: str, seconds: float) -> None:
        count, total = self.current.get(kind, (0, 0.0))
        self.current[kind] = (count + 1, total + seconds)

    def mark(self, _iteration: int) -> None:
        """The end of an iteration of the main loop: what follows counts to the next one."""
        now = time.perf_counter()
        self.profile.wall.append(now - self.started)
        self.started = now
        self.profile.iterations.append(self.current)
        self.current = {}

    def start(self) -> None:
        """The main loop starts: what ran before counts outside it."""
        self.profile.outside = self.current
        self.current, self.started = {}, time.perf_counter()

    def finish(self) -> Profile:
        """The run ended: what ran after the main loop counts outside it."""
        if self.profile.iterations and self.current is not self.profile.outside:
            for kind, (count, seconds) in self.current.items():
                before = self.profile.outside.get(kind, (0, 0.0))
                self.profile.outside[kind] = (before[0] + count, before[1] + seconds)
        return self.profile

    def condition(self, test):
        """Evaluate one host condition (``test``: a function of no arguments)."""
        start = time.perf_counter()
        value = test()
        self.add("host condition", time.perf_counter() - start)
        return value

    def call(self, kind: str, fn):
        """``fn`` counted and timed as ``kind`` at every call."""
        add, clock = self.add, time.perf_counter

        def timed(*args):
            start = clock()
            try:
                return fn(*args)
            finally:
                add(kind, clock() - start)

        return timed

    def device_loop(self, loop):
        """A device loop whose launches count as one ``device loop`` where it ran the loop, else as a
        ``host condition`` (its host work, its reads and writes of stores included)."""
        return ProfiledLoop(loop, self._count_launches)

    def whole_loop(self, loop):
        """The device loop that runs the main loop whole: each launch (its host work, its sinks, waiting
        for its results) shared evenly among the iterations it ran."""
        return ProfiledLoop(loop, self._count_whole)

    def _count_launches(self, launches):
        start, outer = time.perf_counter(), self.current
        self.current = {}  # the launches' reads and writes of stores are the device loop's work
        yield from launches
        self.current = outer
        self.add("device loop" if launches.ran else "host condition", time.perf_counter() - start)

    def _count_whole(self, launches):
        loop = launches.loop
        self.start()
        count, compiled = len(loop.launched), loop.compile_seconds()
        yield from launches
        compile_s = loop.compile_seconds() - compiled  # once per run: not an iteration's work
        if compile_s:
            calls, seconds = self.profile.outside.get("device compile", (0, 0.0))
            self.profile.outside["device compile"] = (calls + 1, seconds + compile_s)
        self.current = {}
        if not launches.ran:
            self.add("host condition", time.perf_counter() - self.started - compile_s)
            return
        for trips, seconds in loop.launched[count:]:
            self.profile.iterations += [{"device loop": (1 / trips, seconds / trips)} for _ in range(trips)]
            self.profile.wall += [seconds / trips] * trips

    def store(self, store):
        return ProfiledStore(store, self)


class ProfiledStore:
    """A tensor store whose reads, writes and frees a :class:`Profiler` counts."""

    def __init__(self, store, profiler: Profiler):
        self.store = store
        self.read = profiler.call("store read", store.read)
        self.write = profiler.call("store write", store.write)
        for name in ("free_point", "free_rows", "free_below", "evict", "load"):
            if hasattr(store, name):
                setattr(self, name, profiler.call("free", getattr(store, name)))

    def __getattr__(self, name):
        return getattr(self.store, name)


class ProfiledLoop:
    """A device loop whose launches a :class:`Profiler` counts (``count``: a generator over the
    launches that counts them)."""

    def __init__(self, loop, count):
        self.loop, self.count = loop, count

    def launches(self, env: dict):
        return ProfiledLaunches(self.loop.launches(env), self.count)

    def __call__(self, launch, values):
        return self.loop(launch, values)

    def __getattr__(self, name):
        return getattr(self.loop, name)


class ProfiledLaunches:
    """A device loop's launches, counted as they go (``ran``: the loop's)."""

    def __init__(self, launches, count):
        self.launches, self.count = launches, count

    @property
    def ran(self) -> bool:
        return self.launches.ran

    def __iter__(self):
        return self.count(self.launches)
