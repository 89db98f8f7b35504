"""The stages of :func:`tempo.api.compile.compile_program`, each a function with typed inputs and outputs.

validate (:class:`Request`) -> lower: the SDG passes (:class:`Lowered`) -> analyse
(:class:`~tempo.schedule.isl_domains.Domains`) -> schedule and build the AST
(:class:`Scheduled`) -> place the memory statements (:class:`Scheduled`) -> plan
(:class:`Planned`) -> the AST passes of :data:`AST_PIPELINE` (:class:`Planned`).
Tiles chosen for a learner that can run early are dropped, and the program compiled
again whole, where no loop over acting frees what they read
(:func:`tempo.schedule.memory.tiles_freed_while_acting`); tiles given that free nothing
large while acting are scheduled again in the nested loops (:func:`schedule` with ``fuse``
off), where acting's loop can run as one device program.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from tempo.api.rt import RecurrentTensor, materialize
from tempo.config import Config
from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.plan import ExecutionPlan, build, swap
from tempo.runtime.backends import Backend, get_backend
from tempo.runtime.memory import parse_bytes
from tempo.schedule import ast as ast_mod
from tempo.schedule import isl_domains, isl_memory, isl_schedule, shift_fusion
from tempo.schedule import memory as schedule_memory
from tempo.schedule import orderings as schedule_orderings
from tempo.symbolic.expr import Expr
from tempo.transforms import (PIPELINE, PassStat, cache_activations, masked_reads, pack_weights, run_pipeline,
                              step_order, tile)

MEMORY_OPTIONS = {"deallocate": "a bool", "device_budget": "a size such as '512MB' or '8GB', or bytes",
                  "plan": "'default', 'memplan' or 'memplan:AGENT'"}


@dataclass(frozen=True)
class Request:
    """What to compile, checked: the fetched tensors, the backend, the SDG passes' configs, the AST
    passes switched on, the memory options, the run's bounds by name (None: not known) and the config."""

    ctx: object
    fetch: tuple
    backend: Backend
    passes: dict
    ast_passes: frozenset
    memory: dict
    bounds: dict | None
    site: object
    config: Config
    early_tiles: bool = False  # whether the tiling pass tiles a learner that can run early (TEMPO §4.3)


@dataclass(frozen=True)
class Lowered:
    """The SDG after the passes, the fetched tensors in it, and what each pass did; ``written``: the
    program as the user wrote it (runs check their reads on it), its definitions checked in
    ``validate_seconds``."""

    sdg: SDG
    fetch: tuple
    stats: tuple[PassStat, ...]
    written: SDG
    validate_seconds: float

    @property
    def keep(self) -> set[int]:
        return {n for n, _ in self.fetch}


@dataclass(frozen=True)
class Scheduled:
    """A schedule (isl's tree, or shift fusion's flat map; None: nothing runs) and the AST that
    scans it; ``moves``: whether it holds evicts and loads."""

    schedule: object
    ast: ast_mod.Stmt
    moves: bool = False


@dataclass(frozen=True)
class Planned:
    """A schedule, its AST and the AST's execution plan."""

    scheduled: Scheduled
    plan: ExecutionPlan


def validate(ctx, fetch: list, backend: str | None, site, passes: dict | None, bounds: dict | None,
             memory: dict | None, config: Config) -> Request:
    """The request, or a TempoError naming what is wrong with it."""
    chosen = backend if isinstance(backend, Backend) else get_backend(backend or config.backend, site)
    unknown = sorted(set(ctx.start) - {d.name for d in ctx.dim_order})
    if unknown:
        raise TempoError(f"Context(start=...) names {', '.join(unknown)}, not a dimension of this context", site)
    for x in fetch:
        _check_fetched(x, ctx, site)
    _check_passes(passes or {}, site)
    sdg_passes = {name: cfg for name, cfg in (passes or {}).items() if name not in AST_PIPELINE}
    on = frozenset(name for name in AST_PIPELINE if (passes or {}).get(name, False))
    options = memory_options(memory, site)
    by_name = bound_values(bounds)
    if options["device_budget"] is not None and bounds:
        sdg_passes = _budget_passes(sdg_passes, options["device_budget"], by_name, chosen)
    early = _early_tiles(sdg_passes, options, by_name, config)
    if early is not None:
        sdg_passes = {**sdg_passes, "tile": early}
    return Request(ctx, tuple(fetch), chosen, sdg_passes, on, options, by_name, site, config, early is not None)


def lower(request: Request) -> Lowered:
    """The SDG of the fetched tensors through the passes of :data:`tempo.transforms.PIPELINE`, and the
    program as written, its definitions checked before any pass."""
    ctx = request.ctx
    fetched = [materialize(x, x.node.site) for x in request.fetch]
    start = time.perf_counter()
    isl_domains.check_definitions(ctx.sdg, request.bounds, frozenset(ctx.parameters))
    validated = time.perf_counter() - start
    fetch_ids = [(x.node.id, x.out) for x in fetched]
    roots = tuple(dict.fromkeys([n for n, _ in fetch_ids] + ctx.roots or list(ctx.sdg.nodes)))
    written = replace(ctx.sdg, roots=roots)
    everywhere = request.backend.orders_every_program or request.config.step_order == "exact"
    defaults = {"pack_weights": pack_weights.Config(panel=request.backend.weight_panel),
                "step_order": step_order.Config(everywhere=everywhere),
                "masked_reads": masked_reads.Config(enabled=request.backend.compiles_loops,
                                                    mask_products=request.backend.skips_masked_rows)}
    sdg, stats = run_pipeline(written, request.passes, dims=ctx.dim_order, defaults=defaults, config=request.config)
    return Lowered(sdg, tuple(sdg.resolve(n, out) for n, out in fetch_ids), tuple(stats),
                   written, validated)


def analyse(lowered: Lowered) -> isl_domains.Domains:
    """The statements' domains and the reads they execute."""
    return isl_domains.analyse(lowered.sdg, list(lowered.sdg.roots))


def schedule(lowered: Lowered, domains: isl_domains.Domains, user_roots, fuse: bool = True) -> object:
    """The program's schedule: for a tiled program (``fuse``), isl's schedule of the whole program with
    the learner's tiles fused into acting's loop by shift fusion, where it fuses any; else the loops
    of :func:`tempo.schedule.orderings.nesting`, whose loop over iterations and the loops nested in
    it may run as device programs (:mod:`tempo.plan.device_loops`)."""
    sdg = lowered.sdg
    orderings = schedule_orderings.sinks_before_next_state(sdg, user_roots) + \
        schedule_orderings.stops_early(sdg, domains.executed) + schedule_orderings.ends_early(sdg, domains.executed)
    if sdg.tiles and fuse:
        computed = isl_schedule.compute_schedule(sdg, domains, orderings)
        fused = shift_fusion.apply(sdg, isl_schedule.all_dependences(sdg, domains, orderings), computed)
        if fused is not None:
            return fused
    return isl_schedule.compute_schedule(sdg, domains, orderings, schedule_orderings.nesting(sdg, domains.executed))


def build_ast(lowered: Lowered, domains: isl_domains.Domains, computed) -> Scheduled:
    """The AST that scans the schedule."""
    return Scheduled(computed, isl_schedule.build_ast(lowered.sdg, domains, computed))


def place_memory(request: Request, lowered: Lowered, domains: isl_domains.Domains, scheduled: Scheduled,
                 timings: dict) -> Scheduled:
    """The schedule rebuilt with the memory statements isl schedules with the computation (TEMPO
    §5.2): the frees (``memory["deallocate"]``) and, under a device budget, the evicts and loads of
    the tensors the swap plan chooses. The default plan chooses from the computation's AST, so
    isl's AST is built once more in all; a registered plan (memplan's) weighs what the frees
    release, so it chooses from the AST with them, built first."""
    memory, sdg = request.memory, lowered.sdg
    if scheduled.schedule is None or not (memory["deallocate"] or memory["device_budget"] is not None):
        return scheduled
    start = time.perf_counter()
    times = isl_schedule.as_map(scheduled.schedule)
    deallocs = schedule_memory.deallocations(sdg, scheduled.ast, lowered.keep, domains,
                                             times) if memory["deallocate"] else []
    budget, resident = memory["device_budget"], swap.chooser(memory["plan"])

    def built(swapped=frozenset()) -> Scheduled:
        placed = isl_memory.with_memory(sdg, domains, scheduled.schedule, deallocs, swapped, times)
        return Scheduled(placed, isl_memory.memory_ast(sdg, domains, placed, bool(swapped)), bool(swapped))

    freed = built() if deallocs and (budget is None or resident is not None) else None
    timings["memory"] = time.perf_counter() - start
    if budget is None:
        return freed or scheduled
    start = time.perf_counter()
    swapped = swap.choose(sdg, (freed or scheduled).ast, lowered.keep, request.bounds, budget, resident)
    out = built(swapped) if swapped else (freed or built()) if deallocs else scheduled
    timings["swap"] = time.perf_counter() - start
    return out


def plan(lowered: Lowered, scheduled: Scheduled) -> Planned:
    """The execution plan of the AST."""
    return Planned(scheduled, build(lowered.sdg, scheduled.ast, lowered.keep))


def partial_unroll(lowered: Lowered, domains: isl_domains.Domains, planned: Planned) -> Planned:
    """The AST built with TEMPO §5.3's partial unrolling (isl separates each loop into the pieces
    where one set of statements runs, so a condition holding on a whole piece is tested once:
    :func:`tempo.schedule.isl_schedule.build_ast`) and its plan, where that plan equals the plan of
    the AST built without it (the same stores, the same frees along the main loop); else
    ``planned``. The planners take each statement once, and a peeled copy of a statement can make
    them give up a window store or a point freed as the main loop goes."""
    scheduled = planned.scheduled
    if scheduled.schedule is None:
        return planned
    unrolled = Scheduled(scheduled.schedule, isl_memory.memory_ast(lowered.sdg, domains, scheduled.schedule,
                                                                    scheduled.moves, separate=True),
                         scheduled.moves)
    candidate = plan(lowered, unrolled)
    return candidate if candidate.plan == planned.plan else planned


# Passes over the scheduled program, in order, each off unless ``passes={name: True}``:
# name -> (key of its seconds in Program.timings, the pass).
AST_PIPELINE: dict[str, tuple[str, Callable[[Lowered, isl_domains.Domains, Planned], Planned]]] = {
    "partial_unroll": ("unroll", partial_unroll),
}


def bound_values(bounds: dict | None) -> dict[str, int] | None:
    """The valid entries of a run's ``bounds`` by name (``Program.run`` reports the others)."""
    if bounds is None:
        return None
    return {key.name if isinstance(key, Expr) else str(key): int(value) for key, value in bounds.items()
            if isinstance(value, (int, np.integer)) and value >= 1}


def memory_options(memory: dict | None, site) -> dict:
    """The memory options with their defaults, each checked."""
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


def _check_fetched(x, ctx, site) -> None:
    if not isinstance(x, RecurrentTensor):
        raise TempoError(f"fetch takes recurrent tensors, got {type(x).__name__}", site)
    if x.ctx is not ctx:
        by = f" (fetched at {site})" if site is not None else ""
        raise TempoError(f"this tensor belongs to another context than the one it is fetched from{by}: "
                         f"build it inside this context's `with ctx:` block, or fetch it with its own "
                         f"context's run/compile", x.node.site)


def _check_passes(passes: dict, site) -> None:
    names = [name for name, _ in PIPELINE] + list(AST_PIPELINE)
    unknown = sorted(set(passes) - set(names))
    if unknown:
        raise TempoError(f"passes names {', '.join(map(repr, unknown))}, not a pass of this compiler; "
                         f"the passes are {', '.join(names)}", site)
    for name, module in PIPELINE:
        cfg = passes.get(name)
        if not (cfg is None or cfg is False or isinstance(cfg, module.Config)):
            raise TempoError(f"passes[{name!r}] takes False (switch the pass off) or a {module.__name__}.Config, "
                             f"got {cfg!r}", site)
    for name in AST_PIPELINE:
        if not isinstance(passes.get(name, False), bool):
            raise TempoError(f"passes[{name!r}] takes True or False, got {passes[name]!r}", site)


def _early_tiles(passes: dict, memory: dict, bounds: dict | None, config: Config):
    """The tiling pass's config that tiles a learner able to run while acting goes on (TEMPO
    §4.3's incrementalisation, :func:`tempo.transforms.tile.early_tiles`), when the run's bounds
    are known and neither tiles (``passes``, ``config.tiles``) nor a device budget are given."""
    if not bounds or "tile" in passes or config.tiles or memory["device_budget"] is not None:
        return None
    return tile.Config(bounds=bounds, early=True)


def _budget_passes(passes: dict, budget: int, bounds: dict, backend: Backend) -> dict:
    """``passes`` with the passes a device budget steers (those not configured already): tiling
    chooses its tiles, activation caching keeps or recomputes each activation by cost."""
    chosen = {"tile": tile.Config(device_budget=budget, bounds=bounds),
              "cache_activations": cache_activations.Config(device_budget=budget, bounds=bounds,
                                                            costs=cache_activations.COSTS[backend.device_kind])}
    return {**chosen, **passes}
