"""From a Context to a runnable Program: the compile driver (its stages are :mod:`tempo.api.stages`)."""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from tempo.api import stages
from tempo.config import Config
from tempo.errors import BoundError, TempoError
from tempo.ir.sdg import SDG
from tempo.plan import ExecutionPlan, build
from tempo.runtime.backends import Backend
from tempo.runtime.executor import Executor, Runnable
from tempo.runtime.executor import source as executor_source
from tempo.runtime.memory import BudgetExceeded, Ledger
from tempo.runtime.profile import Profile, Profiler, loop_dim
from tempo.schedule import ast as ast_mod
from tempo.schedule import isl_domains, shift_fusion
from tempo.schedule.memory import tiles_freed_while_acting
from tempo.symbolic.expr import Expr, bound_of
from tempo.transforms import report


@dataclass
class Program:
    """A compiled program: its SDG, its schedule AST, its execution plan and ``run(bounds)``.

    Compilation is parametric in the bound symbols, so one program runs for
    any bounds. ``plan`` (``print(program.plan)``) holds every decision about
    how the AST runs, made once at compile time (:mod:`tempo.plan`).
    ``timings`` holds the seconds each compile stage took; ``pass_stats``
    what each pass did (``passes_report()`` prints it).
    """

    sdg: SDG
    fetch: list[tuple[int, int]]  # (node id, output)
    domains: isl_domains.Domains
    ast: ast_mod.Stmt
    backend: Backend
    dim_order: tuple[Expr, ...] = ()
    site: object = None
    timings: dict[str, float] = field(default_factory=dict)
    pass_stats: list = field(default_factory=list)  # tempo.transforms.PassStat per pass run
    written: SDG | None = None  # the program as the user wrote it
    written_domains: isl_domains.Domains | None = field(default=None, repr=False)  # its domains, once analysed
    ledger: Ledger | None = None  # the memory accounting of the last run
    memory: dict = field(default_factory=dict)  # the memory options compiled with
    stopped_at: dict | None = None  # where tpo.stop_when ended the last run ({dim: step}); None: at its bounds
    ran_source: str | None = None  # the source the last run's executor generated (its backend's device loops too)
    plan: ExecutionPlan | None = None  # how the AST runs (stores chosen from the reads); None: planned at the first run
    point_plan: ExecutionPlan | None = field(default=None, repr=False)  # the plan of runs with stores="point"
    end_check_every: int | None = None  # steps between host reads of a tpo.end_when flag (None: measured)
    lengths: dict = field(default_factory=dict)  # bound name -> its lengths in the last run (tpo.end_when)
    end_checks: dict = field(default_factory=dict, repr=False)  # bound name -> the last run's EndCheck
    runnables: dict = field(default_factory=dict, repr=False)  # what runs are made of -> their Runnable
    validated: set = field(default_factory=set, repr=False)  # the bounds validate() found in range
    row_limits: dict = field(default_factory=dict)  # bound name -> the rows masked_reads gave its dim's buffers

    def passes_report(self) -> str:
        """A table of the passes run: the SDG's node count before and after each, and its seconds."""
        return report(self.pass_stats)

    def run(self, bounds: dict, stores: str = "auto", profiler: Profiler | None = None) -> list[np.ndarray]:
        """Execute for ``bounds``; one array per fetched tensor. ``stores="point"`` keeps
        every tensor in a point store instead of the store its reads call for. A run that
        ``tpo.stop_when`` ends early leaves the points it did not reach undefined (NaN or 0)
        and sets ``stopped_at``. Along a dim that a ``tpo.end_when`` ends, the arrays keep the
        run's bound (the cap) and hold NaN or 0 past each point's end; ``lengths`` maps the
        dim's bound name to its lengths (an int array over the check's outer dims).
        ``profiler``: see :meth:`profile`."""
        values = self._check_bounds(bounds)
        if frozenset(values.items()) not in self.validated:
            self.validate(values)
            self.validated.add(frozenset(values.items()))
        start = time.perf_counter()
        executor = Executor(self.sdg, self.ast, self.backend, values, end_check_every=self.end_check_every,
                            device_budget=self.memory.get("device_budget"), profiler=profiler,
                            runnable=self.runnable(self.plan_for(stores), values, profiler is not None))
        self.ledger, self.ran_source = executor.ledger, executor.source
        try:
            executor.run()
        except BudgetExceeded as over:
            raise TempoError(self._over_budget(over), self.site) from None
        self.timings["run"] = time.perf_counter() - start
        self.stopped_at = executor.stopped_at
        self.end_checks = {bound_of(self.sdg.nodes[n].domain[-1]).name: check
                           for n, check in executor.end_checks.items()}
        self.lengths = {name: self._lengths(check, values) for name, check in self.end_checks.items()}
        return [self._gather(executor, n, out, values) for n, out in self.fetch]

    def _lengths(self, check, bounds: dict[str, int]) -> np.ndarray:
        """The lengths an end check found, over its outer dims (0 where the run did not reach)."""
        outer = self.sdg.nodes[check.node].domain[:-1]
        out = np.zeros(tuple(bounds[bound_of(d).name] for d in outer), dtype=np.int64)
        for point, length in check.lengths.items():
            out[point] = length
        return out

    def profile(self, bounds: dict) -> Profile:
        """Run for ``bounds`` and count what each iteration of the main loop does, by statement kind:
        kernel and device-loop launches, store reads and writes, frees, host conditions, callbacks
        (sinks, checkpoints) and other user functions, each with its host microseconds
        (:mod:`tempo.runtime.profile`; ``print(program.profile(bounds))``). The wrappers that count
        add their own host time to the run."""
        loop = self.plan_for().main_loop
        profiler = Profiler(None if loop is None else loop_dim(self.sdg, loop))
        self.run(bounds, profiler=profiler)
        return profiler.finish()

    def plan_for(self, stores: str = "auto") -> ExecutionPlan:
        """The plan of runs with ``stores`` (see :meth:`run`), made at most once."""
        if stores == "auto":
            if self.plan is None:
                self.plan = build(self.sdg, self.ast, self._keep())
            return self.plan
        if stores == "point" and self.point_plan is None:
            self.point_plan = build(self.sdg, self.ast, self._keep(), "point")
        return self.point_plan if stores == "point" else build(self.sdg, self.ast, self._keep(), stores)

    def runnable(self, plan: ExecutionPlan, bound_names, profiled: bool = False) -> Runnable:
        """The generated code and bound kernels of runs with ``plan`` and bounds named ``bound_names``
        (:class:`~tempo.runtime.executor.Runnable`), made at most once."""
        parts = (plan, self.ast, self.sdg, self.backend)
        key = (*map(id, parts), frozenset(bound_names), profiled)
        held = self.runnables.get(key)
        if held is None or any(a is not b for a, b in zip((held.plan, held.program, held.sdg, held.backend), parts)):
            held = self.runnables[key] = Runnable(self.sdg, self.ast, self.backend, plan, bound_names, profiled)
        return held

    def bound_names(self) -> set[str]:
        """The names of the bounds every run is given: the bound symbols, and the tile dims' bounds."""
        return set(self.domains.params) | {tiles for tiles, (whole, _) in self.sdg.tiles.items()
                                           if whole in self.domains.params}

    def _keep(self) -> set[int]:
        return {n for n, _ in self.fetch}

    @property
    def code(self) -> str:
        """The Python source the executor generates from the schedule and runs: after a run, that
        run's (with the ``D<k>`` calls of the loops its backend runs as one device program);
        before one, the statement-by-statement source for any bounds."""
        if self.ran_source is not None:
            return self.ran_source
        return executor_source(self.sdg, self.ast, self.plan_for(), self.domains.params)

    def memory_report(self, top: int = 8) -> str:
        """The last run's memory: peak bytes held in tensor stores and the tensors holding the most then."""
        if self.ledger is None:
            raise TempoError("memory_report() describes a run: call program.run(bounds) first", self.site)
        return self.ledger.report(top)

    def plot_memory(self, path: str) -> None:
        """A PNG of the bytes live in tensor stores over the last run, against kernel launches."""
        if self.ledger is None:
            raise TempoError("plot_memory() draws a run: call program.run(bounds) first", self.site)
        self.ledger.plot(path)

    def validate(self, bounds: dict[str, int] | None = None) -> None:
        """Check the program as the user wrote it, before any pass, for out-of-range reads,
        for these bounds or (None) for every bound: the verdict never depends on the data
        (a pass may fold away the read of an all-zero constant). The program as written is
        analysed only where a read may leave its source's domain (:func:`isl_domains.check_reads`)."""
        isl_domains.check_reads(self.written or self.sdg, bounds, self._written_domains)

    def _written_domains(self) -> isl_domains.Domains:
        """The domains of the program as the user wrote it, analysed at most once."""
        if self.written is None:
            return self.domains
        if self.written_domains is None:
            self.written_domains = isl_domains.analyse(self.written, list(self.written.roots))
        return self.written_domains

    def _over_budget(self, over: BudgetExceeded) -> str:
        largest = sorted(over.holders.items(), key=lambda kv: -kv[1])[:5]
        held = "; ".join(f"{nbytes / 2**20:.1f} MiB: "
                         f"{self.sdg.describe(int(name.rsplit('%', 1)[1])) if '%' in name else name}"
                         for name, nbytes in largest)  # a tensor store's, or a device loop's buffers
        return (f"the device budget of {over.budget / 2**20:.1f} MiB cannot hold this program: "
                f"{over.live / 2**20:.1f} MiB would be live at once (what swapping to the host leaves on the "
                f"device: what one launch reads and writes, and what is read at the point it is written). "
                f"The largest tensors held then: {held}")

    def _check_bounds(self, bounds: dict) -> dict[str, int]:
        values = {}
        for key, value in bounds.items():
            if isinstance(key, Expr) and key.is_symbol and key.kind == "step":
                raise BoundError(f"bounds are given for bound symbols such as {key.name.upper()}, "
                                 f"not for the step {key.name}", self.site)
            name = key.name if isinstance(key, Expr) else str(key)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise BoundError(f"bound {name} must be a positive integer, got {value!r}", self.site)
            values[name] = int(value)
        for tiles, (whole, size) in self.sdg.tiles.items():  # a tile dim's bound follows from its dim's
            if whole in values:
                values[tiles] = -(-values[whole] // size)
        for name, rows in self.row_limits.items():
            if values.get(name, 0) > rows:
                raise BoundError(f"bound {name} = {values[name]} is more than the {rows} rows the masked_reads "
                                 f"pass gave the buffers of reads along its dim: compile with rows of at least "
                                 f"{values[name]} (passes={{'masked_reads': Config(rows=...)}})", self.site)
        missing = [p for p in self.domains.params if p not in values]
        if missing:
            raise BoundError(f"no value given for bound symbol {', '.join(missing)} "
                             f"(pass bounds={{{missing[0]}: ...}} to run)", self.site)
        return values

    def _gather(self, executor: Executor, n: int, out: int, bounds: dict[str, int]) -> np.ndarray:
        node = self.sdg.nodes[n]
        store = executor.stores[(n, out)]
        lead = self.sdg.vectorized.get(n, ())
        extent = tuple(bounds[bound_of(d).name] for d in node.domain)
        values = {p: self.backend.to_numpy(v) for p, v in store.items()}
        values = _within_ends(self.sdg, executor.end_checks, n, bounds, values)
        shapes = {v.shape for v in values.values()}
        if len(shapes) > 1:
            out = np.empty(extent, dtype=object)
            for p in np.ndindex(*extent):
                out[p] = values.get(p)
            return out
        spatial = shapes.pop() if shapes else ()
        dtype = np.dtype(node.dtypes[out])
        fill = np.nan if dtype.kind in "fc" else 0
        out = np.full(extent + tuple(spatial), fill, dtype=dtype)
        for p, v in values.items():
            out[p] = v
        if not lead:
            return out
        axes = list(node.domain) + list(lead)
        order = sorted(range(len(axes)), key=lambda k: self.dim_order.index(axes[k]))
        return np.transpose(out, order + list(range(len(axes), out.ndim)))


def _within_ends(sdg: SDG, checks: dict, n: int, bounds: dict[str, int], values: dict) -> dict:
    """Node ``n``'s points as a fetch returns them along dims that end at run time: the points past
    their end left out, and a vectorized dim's axis padded to the cap with NaN or 0."""
    node, lead = sdg.nodes[n], sdg.vectorized.get(n, ())
    for check in checks.values():
        domain = sdg.nodes[check.node].domain
        t, outer = domain[-1], domain[:-1]
        if not all(any(x is d for x in node.domain) for d in outer):
            continue
        axes = [next(k for k, x in enumerate(node.domain) if x is d) for d in outer]
        length = check.lengths.get
        if any(x is t for x in node.domain):
            axis = next(k for k, x in enumerate(node.domain) if x is t)
            values = {p: v for p, v in values.items() if p[axis] < length(tuple(p[k] for k in axes), 0)}
        elif any(x is t for x in lead):
            axis, cap = next(k for k, x in enumerate(lead) if x is t), bounds[bound_of(t).name]
            values = {p: _padded(v, axis, cap) for p, v in values.items()}
    return values


def _padded(value: np.ndarray, axis: int, size: int) -> np.ndarray:
    """``value`` with ``axis`` padded to ``size`` with NaN (floats) or 0."""
    fill = np.nan if value.dtype.kind in "fc" else 0
    widths = [(0, size - value.shape[axis]) if k == axis else (0, 0) for k in range(value.ndim)]
    return np.pad(value, widths, constant_values=fill)


class FirstCompile(Exception):
    """Raised by the first compile inside :func:`stop_at_first_compile`: ``program`` is what it
    compiled, ``bounds`` the bounds of the run it was compiled for (by name; None: ``ctx.compile``)."""

    def __init__(self, program: Program, bounds: dict[str, int] | None):
        super().__init__("a Tempo program was compiled")
        self.program, self.bounds = program, bounds


_STOPPING: list[dict] = []  # the memory options of the active stop_at_first_compile blocks


@contextmanager
def stop_at_first_compile(memory: dict | None = None):
    """Inside this block, compiling a program raises :class:`FirstCompile` instead of running it, the
    program compiled with ``memory`` over its own memory options: a tool (``tempo memplan extract``)
    runs a user's script up to its first compiled program this way."""
    _STOPPING.append(dict(memory or {}))
    try:
        yield
    finally:
        _STOPPING.pop()


def compile_program(ctx, fetch: list, backend: str | None = None, site=None, passes: dict | None = None,
                    bounds: dict | None = None, memory: dict | None = None, config: Config | None = None) -> Program:
    """Validate, transform, analyse, schedule, place memory, plan and build the AST of ``ctx``'s
    program: the stages of :mod:`tempo.api.stages`, in order.

    ``passes`` maps a pass name of :data:`tempo.transforms.PIPELINE` to its
    config, or to False to switch it off; ``{"partial_unroll": True}`` switches
    on that pass of :data:`tempo.api.stages.AST_PIPELINE` (off by default: it
    tests fewer conditions but measures no faster). With nothing fetched, every
    tensor of the program is computed (sinks and parameter updates included).
    ``bounds``, the bounds of the run the program is compiled for (``ctx.run``),
    only let errors quote them: the program is compiled for every bound.
    ``memory``: ``{"deallocate": False}`` leaves out the deallocations after
    each tensor's last reader (:mod:`tempo.schedule.memory`);
    ``{"device_budget": "2GB"}`` holds the device tier of every run to that
    many bytes, with evict and load statements that keep large sliced tensors
    in the host tier (:mod:`tempo.plan.swap`); ``"plan": "memplan"`` keeps
    on the device those that ``tempo.memplan`` fits into the budget.
    ``config``: the compiler's :class:`tempo.config.Config` (None: the
    environment's, :meth:`~tempo.config.Config.from_env`).

    Python's cyclic garbage collector is paused meanwhile (:func:`collector_paused`).
    """
    with collector_paused():
        return _compiled(ctx, fetch, backend, site, passes, bounds, memory, config)


@contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside the block, and as it was after it. A compile
    allocates many objects that live on (the SDGs, isl's sets, the plan), so the collector would
    run a full collection during it, walking every object of the process (NumPy's, gymnasium's, the
    program's) to free few: about 17 ms of a 0.17 s compile of ``examples/reinforce.py``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compiled(ctx, fetch: list, backend, site, passes, bounds, memory, config) -> Program:
    """:func:`compile_program`'s stages, in order."""
    timings: dict[str, float] = {}
    config = Config.from_env() if config is None else config
    stopping = _STOPPING[-1] if _STOPPING else {}
    request = stages.validate(ctx, fetch, backend, site, passes, bounds, {**(memory or {}), **stopping}, config)
    lowered = stages.lower(request)
    timings["validate"] = lowered.validate_seconds
    for stat in lowered.stats:  # a pass run twice (tiles a budget chose, then streamed) counts both runs
        timings[stat.name] = timings.get(stat.name, 0.0) + stat.seconds
    domains = _timed(timings, "analyse", stages.analyse, lowered)
    schedule = _timed(timings, "schedule", stages.schedule, lowered, domains, ctx.roots)
    scheduled = _placed(request, lowered, domains, schedule, timings)
    if lowered.sdg.tiles and not tiles_freed_while_acting(lowered.sdg, scheduled.ast):
        if request.early_tiles:
            return _compiled(ctx, fetch, backend, site, {**(passes or {}), "tile": False}, bounds, memory, config)
        if shift_fusion.fused(schedule):  # tiles that free nothing while acting: the nested loops instead
            schedule = _timed(timings, "schedule", stages.schedule, lowered, domains, ctx.roots, False)
            scheduled = _placed(request, lowered, domains, schedule, timings)
    planned = _timed(timings, "plan", stages.plan, lowered, scheduled)
    for name, (key, ast_pass) in stages.AST_PIPELINE.items():
        if name in request.ast_passes:
            planned = _timed(timings, key, ast_pass, lowered, domains, planned)
    program = Program(lowered.sdg, list(lowered.fetch), domains, planned.scheduled.ast, request.backend,
                      tuple(ctx.dim_order), site, timings, list(lowered.stats), written=lowered.written,
                      memory=request.memory, plan=planned.plan, end_check_every=config.end_check_every,
                      row_limits=_row_limits(request.passes, ctx.dim_order))
    _timed(timings, "codegen", program.runnable, program.plan, program.bound_names())
    if _STOPPING:
        raise FirstCompile(program, request.bounds)
    return program


def _row_limits(passes: dict, dims) -> dict[str, int]:
    """Bound name -> the rows the ``masked_reads`` pass was given for its dim: a run's bound may not exceed
    them (the buffers hold that many rows)."""
    cfg = passes.get("masked_reads")
    if not getattr(cfg, "enabled", False):
        return {}
    return {bound_of(d).name: int(cfg.rows[d.name]) for d in dims if d.name in cfg.rows}


def _placed(request: stages.Request, lowered: stages.Lowered, domains, schedule, timings: dict) -> stages.Scheduled:
    """The AST of ``schedule`` with its memory statements."""
    scheduled = _timed(timings, "ast", stages.build_ast, lowered, domains, schedule)
    return stages.place_memory(request, lowered, domains, scheduled, timings)


def _timed(timings: dict, key: str, stage, *args):
    """``stage(*args)``, its seconds added to ``timings[key]`` (a stage run again counts both runs)."""
    start = time.perf_counter()
    out = stage(*args)
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start
    return out
