"""SDG-to-SDG passes, each ``apply(sdg, cfg) -> sdg``, run in the order of :data:`PIPELINE`.

:func:`run_pipeline` runs them for the compiler: a pass is switched off by
``passes={name: False}`` and configured by ``passes={name: module.Config(...)}``;
it records what each pass did (:class:`PassStat`) and, with ``verify`` (or
the :class:`tempo.config.Config`'s ``verify``, seeded by ``TEMPO_VERIFY=1``),
checks the SDG with :func:`tempo.ir.verify.verify` after every pass. The
config's ``passes_off`` (``TEMPO_PASSES_OFF=cse,dce``) switches passes off for
every compile that does not configure them itself (the test suite runs this way
to compare programs with and without them); its ``tiles`` (``TEMPO_TILES=t:3``)
tiles dim ``t`` in tiles of 3 rows in every compile that does not configure the
tiling pass (the suites run this way too).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from tempo.config import Config
from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.ir.verify import verify as verify_sdg
from tempo.symbolic.expr import bound_of
from tempo.transforms import (cache_activations, contract, cse, dce, domain_reduction, fuse, lift, masked_reads,
                              pack_weights, simplify, step_order, superopt, tile, vectorize)

# (name, module), in order; a compile may switch any of them off by name. The
# simplification passes and lifting come first: each leaves less for
# vectorization, fusion and the scheduler; activation caching then sends the
# learner to the activations acting computed, and dead-code elimination sweeps
# up what they all disconnected. Contraction follows vectorization, which forms the
# batched products it folds; tiling then cuts the learner's axis over ``t`` into
# tiles, the contractions and sums over it becoming accumulations. Weight packing
# stores constant weights in the backend's layout for the products of few rows
# vectorization left; on a backend that compiles loops, reads that grow with a
# loop's counter become buffers of a fixed number of rows, read whole and masked;
# step order marks the sums and products over a loop dim's steps, whose axes are
# settled by then, before fusion folds its steps into their islands.
PIPELINE = (
    ("cse", cse),
    ("simplify", simplify),
    ("domain_reduction", domain_reduction),
    ("lift", lift),
    ("cache_activations", cache_activations),
    ("dce", dce),
    ("vectorize", vectorize),
    ("contract", contract),
    ("tile", tile),
    ("pack_weights", pack_weights),
    ("masked_reads", masked_reads),
    ("step_order", step_order),
    ("fuse", fuse),
    ("superopt", superopt),
)
SIMPLIFICATION = ("cse", "simplify", "domain_reduction", "dce")


@dataclass(frozen=True)
class PassStat:
    """What one pass did: the SDG's node count before and after it, and its seconds."""

    name: str
    nodes_before: int
    nodes_after: int
    seconds: float


def run_pipeline(sdg: SDG, passes: dict | None = None, verify: bool | None = None,
                 dims=None, pipeline=None, defaults: dict | None = None,
                 config: Config | None = None) -> tuple[SDG, list[PassStat]]:
    """Run ``pipeline`` (default :data:`PIPELINE`) on ``sdg``; returns the new SDG and one
    :class:`PassStat` per pass run.

    ``passes`` maps a pass name to False (off) or its ``Config``; ``verify``
    (default: ``config.verify``) checks the SDG before the first pass and after
    every pass, naming the pass that broke it; ``dims``: the declared dims, in
    order, for that check; ``defaults``: configs for passes that ``passes`` and
    ``config.passes_off`` leave unsaid (the backend's); ``config``: the compiler's
    :class:`tempo.config.Config` (None: the environment's). When the tiling pass chooses its
    tiles from a device budget, the passes from vectorization to tiling run again with
    those tiles given, so that vectorization streams the tiled dims as it does for tiles
    given by the user (the stats hold both runs); so too when it chooses them for a learner
    that can run early (``tile.Config(early=True)``).
    """
    passes = dict(passes or {})
    pipeline = PIPELINE if pipeline is None else pipeline
    names = [name for name, _ in pipeline]
    config = Config.from_env() if config is None else config
    for name in config.passes_off:
        if name not in names:
            raise TempoError(f"{config.named('passes_off')} names {name!r}, not a pass of this compiler; "
                             f"the passes are {', '.join(names)}")
        passes.setdefault(name, False)
    if config.tiles and "tile" in names:  # the dims this program has
        present = {d.name for node in sdg.nodes.values() for d in node.domain}
        sizes = {name: size for name, size in config.tiles.items() if name in present}
        if sizes:
            passes.setdefault("tile", tile.Config(tiles=sizes))
    for name, cfg in (defaults or {}).items():  # the backend's configs, for passes neither given nor off
        passes.setdefault(name, cfg)
    chosen_by_budget = isinstance(passes.get("tile"), tile.Config) and passes["tile"].chooses \
        and {"vectorize", "tile"} <= set(names) and "vectorize" not in passes
    if isinstance(passes.get("tile"), tile.Config) and passes["tile"].tiles and "vectorize" in names:
        passes.setdefault("vectorize", vectorize.Config(stream=tuple(passes["tile"].tiles)))
    verify = config.verify if verify is None else verify
    if verify:
        verify_sdg(sdg, dims)
    if not chosen_by_budget:
        return _run(sdg, pipeline, passes, verify, dims)[:2]
    split = names.index("tile") + 1  # the tiles the budget chooses are known after the tiling pass
    sdg, stats, given = _run(sdg, pipeline[:split], passes, verify, dims)
    if sdg.tiles:  # from vectorization on again, streaming the tiled dims
        chosen = _chosen_tiles(given["vectorize"], sdg)
        passes = {**passes, "tile": replace(passes["tile"], tiles=chosen),
                  "vectorize": vectorize.Config(stream=tuple(chosen))}
        sdg, more, _ = _run(given["vectorize"], pipeline[names.index("vectorize"):split], passes, verify, dims)
        stats += more
    sdg, more, _ = _run(sdg, pipeline[split:], passes, verify, dims)
    return sdg, stats + more


def _run(sdg: SDG, pipeline, passes: dict, verify: bool, dims) -> tuple[SDG, list[PassStat], dict[str, SDG]]:
    """``sdg`` through the passes of ``pipeline`` not switched off; also the SDG each pass was given."""
    stats, given = [], {}
    for name, module in pipeline:
        cfg = passes.get(name)
        if cfg is False:
            continue
        given[name] = sdg
        before, start = len(sdg.nodes), time.perf_counter()
        sdg = module.apply(sdg, cfg or module.Config())
        stats.append(PassStat(name, before, len(sdg.nodes), time.perf_counter() - start))
        if verify:
            verify_sdg(sdg, dims, after=name)
    return sdg, stats, given


def _chosen_tiles(given: SDG, tiled: SDG) -> dict[str, int]:
    """The tiles the tiling pass chose for ``tiled``, by the name of the dim of ``given`` each cuts."""
    dims = {bound_of(d).name: d.name for node in given.nodes.values() for d in node.domain}
    return {dims[whole]: size for whole, size in tiled.tiles.values()}


def report(stats: list[PassStat]) -> str:
    """One line per pass: its name, the node count before and after it, and its seconds."""
    lines = [f"{'pass':<18}{'nodes before':>14}{'nodes after':>13}{'seconds':>10}"]
    for s in stats:
        lines.append(f"{s.name:<18}{s.nodes_before:>14}{s.nodes_after:>13}{s.seconds:>10.3f}")
    return "\n".join(lines)


__all__ = ["PIPELINE", "SIMPLIFICATION", "PassStat", "cache_activations", "contract", "cse", "dce", "domain_reduction", "fuse", "lift",
           "masked_reads", "report", "run_pipeline", "simplify", "step_order", "superopt", "tile", "vectorize"]
