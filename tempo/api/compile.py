"""From a Context to a runnable Program: analyse, validate, schedule, build the AST."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np

from tempo.errors import BoundError, TempoError
from tempo.ir.sdg import SDG
from tempo.runtime.backends import Backend, get_backend
from tempo.runtime.executor import Executor, runtime_plan
from tempo.runtime.executor import source as executor_source
from tempo.runtime.memory import BudgetExceeded, Ledger, parse_bytes
from tempo.schedule import ast as ast_mod
from tempo.schedule import isl_domains, isl_memory, isl_schedule
from tempo.schedule import memory as schedule_memory
from tempo.schedule import swap, swap_passes
from tempo.schedule import orderings as schedule_orderings
from tempo.schedule import shift_fusion
from tempo.symbolic.expr import Expr, bound_of


@dataclass
class Program:
    """A compiled program: its SDG, its schedule AST, and ``run(bounds)``.

    Compilation is parametric in the bound symbols, so one program runs for
    any bounds. ``timings`` holds the seconds each compile stage took;
    ``pass_stats`` what each pass did (``passes_report()`` prints it).
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
    written: tuple[SDG, isl_domains.Domains] | None = None  # the program as the user wrote it, with its domains
    ledger: Ledger | None = None  # the memory accounting of the last run
    memory: dict = field(default_factory=dict)  # the memory options compiled with
    stopped_at: dict | None = None  # where tpo.stop_when ended the last run ({dim: step}); None: at its bounds
    ran_source: str | None = None  # the source the last run's executor generated (its backend's device loops too)

    def passes_report(self) -> str:
        """A table of the passes run: the SDG's node count before and after each, and its seconds."""
        from tempo.transforms import report

        return report(self.pass_stats)

    def run(self, bounds: dict, stores: str = "auto") -> list[np.ndarray]:
        """Execute for ``bounds``; one array per fetched tensor. ``stores="point"`` keeps
        every tensor in a point store instead of the store its reads call for. A run that
        ``tpo.stop_when`` ends early leaves the points it did not reach undefined (NaN or 0)
        and sets ``stopped_at``."""
        values = self._check_bounds(bounds)
        self.validate(values)
        start = time.perf_counter()
        executor = Executor(self.sdg, self.ast, self.backend, values, keep={n for n, _ in self.fetch},
                            stores=stores, device_budget=self.memory.get("device_budget"))
        self.ledger, self.ran_source = executor.ledger, executor.source
        try:
            executor.run()
        except BudgetExceeded as over:
            raise TempoError(self._over_budget(over), self.site) from None
        self.timings["run"] = time.perf_counter() - start
        self.stopped_at = executor.stopped_at
        return [self._gather(executor, n, out, values) for n, out in self.fetch]

    @property
    def code(self) -> str:
        """The Python source the executor generates from the schedule and runs: after a run, that
        run's (with the ``D<k>`` calls of the loops its backend runs as one device program);
        before one, the statement-by-statement source for any bounds."""
        if self.ran_source is not None:
            return self.ran_source
        return executor_source(self.sdg, self.ast, {n for n, _ in self.fetch}, self.domains.params)

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
        (a pass may fold away the read of an all-zero constant)."""
        sdg, domains = self.written or (self.sdg, self.domains)
        context = domains.context if bounds is None else isl_domains.pinned(domains, bounds)
        isl_domains.check_reads_in_range(sdg, domains, context)

    def _over_budget(self, over: BudgetExceeded) -> str:
        largest = sorted(over.holders.items(), key=lambda kv: -kv[1])[:5]
        held = "; ".join(f"{nbytes / 2**20:.1f} MiB: {self.sdg.describe(int(name.rsplit('%', 1)[1]))}"
                         for name, nbytes in largest)
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


def _bound_values(bounds: dict | None) -> dict[str, int] | None:
    """The valid entries of a run's ``bounds`` by name (``Program.run`` reports the others)."""
    if bounds is None:
        return None
    return {key.name if isinstance(key, Expr) else str(key): int(value) for key, value in bounds.items()
            if isinstance(value, (int, np.integer)) and value >= 1}


AST_PASSES = ("partial_unroll",)  # passes over the schedule AST, switched on by ``passes={name: True}``

MEMORY_OPTIONS = {"deallocate": "a bool", "device_budget": "a size such as '512MB' or '8GB', or bytes",
                  "plan": "'default', 'memplan' or 'memplan:AGENT'"}


def compile_program(ctx, fetch: list, backend: str | None = None, site=None, passes: dict | None = None,
                    bounds: dict | None = None, memory: dict | None = None) -> Program:
    """Transform, analyse, validate, schedule and build the AST of ``ctx``'s program.

    ``passes`` maps a pass name of :data:`tempo.transforms.PIPELINE` to its
    config, or to False to switch it off; ``{"partial_unroll": True}`` switches
    on the AST pass of :func:`_partially_unrolled` (off by default: it tests
    fewer conditions but measures no faster). With nothing fetched, every tensor
    of the program is computed (sinks and parameter updates included).
    ``bounds``, the bounds of the run the program is compiled for (``ctx.run``),
    only let errors quote them: the program is compiled for every bound.
    ``memory``: ``{"deallocate": False}`` leaves out the deallocations after
    each tensor's last reader (:mod:`tempo.schedule.memory`);
    ``{"device_budget": "2GB"}`` holds the device tier of every run to that
    many bytes, with evict and load statements that keep large sliced tensors
    in the host tier (:mod:`tempo.schedule.swap`); ``"plan": "memplan"`` keeps
    on the device those that ``tempo.memplan`` fits into the budget.
    """
    from tempo.transforms import PIPELINE, pack_weights, run_pipeline

    from tempo.api.rt import RecurrentTensor, materialize

    chosen, given = get_backend(backend, site), (dict(passes or {}), memory)
    unknown = sorted(set(ctx.start) - {d.name for d in ctx.dim_order})
    if unknown:
        raise TempoError(f"Context(start=...) names {', '.join(unknown)}, not a dimension of this context", site)
    for x in fetch:
        if not isinstance(x, RecurrentTensor):
            raise TempoError(f"fetch takes recurrent tensors, got {type(x).__name__}", site)
        if x.ctx is not ctx:
            by = f" (fetched at {site})" if site is not None else ""
            raise TempoError(f"this tensor belongs to another context than the one it is fetched from{by}: "
                             f"build it inside this context's `with ctx:` block, or fetch it with its own "
                             f"context's run/compile", x.node.site)
    names = [name for name, _ in PIPELINE] + list(AST_PASSES)
    unknown_passes = sorted(set(passes or {}) - set(names))
    if unknown_passes:
        raise TempoError(f"passes names {', '.join(map(repr, unknown_passes))}, not a pass of this compiler; "
                         f"the passes are {', '.join(names)}", site)
    for name, module in PIPELINE:
        cfg = (passes or {}).get(name)
        if not (cfg is None or cfg is False or isinstance(cfg, module.Config)):
            raise TempoError(f"passes[{name!r}] takes False (switch the pass off) or a {module.__name__}.Config, "
                             f"got {cfg!r}", site)
    unroll = (passes or {}).get("partial_unroll", False)
    if not isinstance(unroll, bool):
        raise TempoError(f"passes['partial_unroll'] takes True or False, got {unroll!r}", site)
    passes = {name: cfg for name, cfg in (passes or {}).items() if name not in AST_PASSES}
    memory = _memory_options(memory, site)
    if memory["device_budget"] is not None and bounds:
        passes = _budget_passes(passes, memory["device_budget"], _bound_values(bounds), chosen)
    fetched = [materialize(x, x.node.site) for x in fetch]
    isl_domains.check_definitions(ctx.sdg, _bound_values(bounds), frozenset(ctx.parameters))
    fetch_ids = [(x.node.id, x.out) for x in fetched]
    roots = tuple(dict.fromkeys([n for n, _ in fetch_ids] + ctx.roots or list(ctx.sdg.nodes)))
    start = time.perf_counter()
    written = replace(ctx.sdg, roots=roots)
    written = (written, isl_domains.analyse(written, list(roots)))
    validated = time.perf_counter() - start
    early = _early_tiles(passes, memory, bounds)
    if early is not None:
        passes = {**passes, "tile": early}
    sdg, pass_stats = run_pipeline(written[0], passes, dims=ctx.dim_order,
                                   defaults={"pack_weights": pack_weights.Config(panel=chosen.weight_panel)})
    timings: dict[str, float] = {"validate": validated}
    for stat in pass_stats:  # a pass run twice (tiles a budget chose, then streamed) counts both runs
        timings[stat.name] = timings.get(stat.name, 0.0) + stat.seconds
    fetch_ids = [sdg.resolve(n, out) for n, out in fetch_ids]
    roots = list(sdg.roots)
    start = time.perf_counter()
    domains = isl_domains.analyse(sdg, roots)
    timings["analyse"] = time.perf_counter() - start
    start = time.perf_counter()
    orderings = schedule_orderings.sinks_before_next_state(sdg, ctx.roots) + \
        schedule_orderings.stops_early(sdg, domains.executed)
    schedule = isl_schedule.compute_schedule(sdg, domains, orderings)
    fused = shift_fusion.apply(sdg, isl_schedule.all_dependences(sdg, domains, orderings), schedule)
    timings["schedule"] = time.perf_counter() - start
    start = time.perf_counter()
    scheduled = schedule if fused is None else fused
    tree = isl_schedule.build_ast(sdg, domains, scheduled)
    timings["ast"] = time.perf_counter() - start
    placed, swapped = scheduled, False
    if scheduled is not None and (memory["deallocate"] or memory["device_budget"] is not None):
        tree, placed, swapped = _with_memory(sdg, domains, scheduled, tree,
                                             fused if fused is not None else schedule.get_map(),
                                             {n for n, _ in fetch_ids}, _bound_values(bounds), memory, timings)
    if early is not None and sdg.tiles and not schedule_memory.tiles_freed_while_acting(sdg, tree):
        return compile_program(ctx, fetch, backend, site, {**given[0], "tile": False}, bounds, given[1])
    if unroll and scheduled is not None:
        start = time.perf_counter()
        tree = _partially_unrolled(sdg, domains, placed, swapped, tree, {n for n, _ in fetch_ids})
        timings["unroll"] = time.perf_counter() - start
    return Program(sdg, fetch_ids, domains, tree, chosen, tuple(ctx.dim_order), site, timings, pass_stats,
                   written=written, memory=memory)


def _with_memory(sdg, domains, scheduled, tree: ast_mod.Stmt, times, keep: set[int], bounds: dict, memory: dict,
                 timings: dict) -> tuple[ast_mod.Stmt, object, bool]:
    """``tree`` rebuilt from ``scheduled`` with the memory statements isl schedules with the
    computation (TEMPO §5.2): the frees (``memory["deallocate"]``) and, under a device budget,
    the evicts and loads of the tensors the swap plan chooses. The default plan chooses from
    the computation's AST, so isl's AST is built once more in all; a memplan plan weighs what
    the frees release, so it chooses from the AST with them, built first. Returns the AST, the
    schedule it scans and whether it holds moves."""
    start = time.perf_counter()
    deallocs = schedule_memory.deallocations(sdg, tree, keep, domains, times) if memory["deallocate"] else []
    budget, plan = memory["device_budget"], memory["plan"]

    def built(swapped=frozenset()) -> tuple[object, ast_mod.Stmt]:
        placed = isl_memory.with_memory(sdg, domains, scheduled, deallocs, swapped)
        return placed, _memory_ast(sdg, domains, placed, bool(swapped))

    freed = built() if deallocs and (budget is None or plan != "default") else None
    timings["memory"] = time.perf_counter() - start
    if budget is None:
        placed, tree = freed or (scheduled, tree)
        return tree, placed, False
    start = time.perf_counter()
    swapped = swap.choose(sdg, freed[1] if freed else tree, keep, bounds, budget, plan)
    placed = scheduled
    if swapped:
        placed, tree = built(swapped)
    elif deallocs:
        placed, tree = freed or built()
    timings["swap"] = time.perf_counter() - start
    return tree, placed, bool(swapped)


def _memory_ast(sdg, domains, placed, moves: bool, separate: bool = False) -> ast_mod.Stmt:
    """isl's AST of ``placed`` (the schedule with its memory statements), its loops of frees
    batched (TEMPO §5.3's promotion) and, when it holds moves, the redundant ones removed;
    ``separate``: partially unrolled (:func:`tempo.schedule.isl_schedule.build_ast`)."""
    tree = schedule_memory.batch_frees(isl_schedule.build_ast(sdg, domains, placed, separate=separate))
    return swap_passes.apply(sdg, tree) if moves else tree


def _partially_unrolled(sdg, domains, placed, swapped: bool, tree: ast_mod.Stmt, keep: set[int]) -> ast_mod.Stmt:
    """The AST of ``placed`` built with TEMPO §5.3's partial unrolling (isl separates each loop into
    the pieces where one set of statements runs, so a condition holding on a whole piece is tested
    once: :func:`tempo.schedule.isl_schedule.build_ast`), where the executor plans the same stores
    and the same frees along the main loop for it as for ``tree``, the AST built without it; else
    ``tree``. Those analyses take each statement once, and a peeled copy of a statement can make
    them give up a window store or a point freed as the main loop goes."""
    unrolled = _memory_ast(sdg, domains, placed, swapped, separate=True)
    return unrolled if runtime_plan(sdg, unrolled, keep) == runtime_plan(sdg, tree, keep) else tree


def _budget_passes(passes: dict, budget: int, bounds: dict, backend: Backend) -> dict:
    """``passes`` with the passes a device budget steers (those not configured already): tiling
    chooses its tiles, activation caching keeps or recomputes each activation by cost."""
    from tempo.transforms import cache_activations, tile

    chosen = {"tile": tile.Config(device_budget=budget, bounds=bounds),
              "cache_activations": cache_activations.Config(device_budget=budget, bounds=bounds,
                                                            costs=cache_activations.COSTS[_device_kind(backend)])}
    return {**chosen, **passes}


def _early_tiles(passes: dict, memory: dict, bounds: dict | None):
    """The tiling pass's config that tiles a learner able to run while acting goes on (TEMPO
    §4.3's incrementalisation, :func:`tempo.transforms.tile.early_tiles`), when the run's bounds
    are known and neither tiles (``passes``, ``TEMPO_TILES``) nor a device budget are given. The
    tiles are dropped where the schedule does not free what they read while acting goes on
    (:func:`tempo.schedule.memory.tiles_freed_while_acting`)."""
    from tempo.transforms import tile

    if not bounds or "tile" in passes or os.environ.get("TEMPO_TILES") or memory["device_budget"] is not None:
        return None
    return tile.Config(bounds=_bound_values(bounds), early=True)


def _device_kind(backend: Backend) -> str:
    """``"gpu"`` when ``backend`` computes on a GPU, else ``"cpu"``."""
    device = getattr(backend, "device", None)
    kind = getattr(device, "platform", None) or getattr(device, "type", None) or ""
    if device is None and backend.name == "jax":
        import jax

        kind = jax.default_backend()
    return "gpu" if str(kind).lower() in ("gpu", "cuda") else "cpu"


def _memory_options(memory: dict | None, site) -> dict:
    options = {"deallocate": True, "device_budget": None, "plan": "default"}
    for key, value in (memory or {}).items():
        if key not in MEMORY_OPTIONS:
            raise TempoError(f"memory names {key!r}, not a memory option; the options are "
                             f"{', '.join(MEMORY_OPTIONS)}", site)
        parsed = value if key == "deallocate" and isinstance(value, bool) else \
            parse_bytes(value) if key == "device_budget" else \
            value if key == "plan" and swap.known_plan(value) else None
        if parsed is None:
            raise TempoError(f"memory[{key!r}] takes {MEMORY_OPTIONS[key]}, got {value!r}", site)
        options[key] = parsed
    return options
