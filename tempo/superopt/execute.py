"""Run a graph on a backend and measure its end-to-end latency.

Backends are a registry of ``compile_graph(graph, **options) -> run(feeds)``
functions with their options, imported lazily so that the NumPy-only parts
never load torch or JAX. Every run constant-folds first
(:mod:`tempo.superopt.fold`). Everything that measures a graph (the
environment, the cost model, the searches, the final timings) uses the
default backend unless told otherwise; :func:`set_default_backend` switches
them all, e.g. to ``torch-cuda`` to optimise for a GPU.
"""
from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.fold import fold_constants
from tempo.superopt.graph import Graph
from tempo.superopt.latency import Latency, time_call, time_runs
from tempo.superopt.reference import random_feeds

BACKENDS: dict[str, tuple[str, dict]] = {
    "torch": ("tempo.superopt.torch_backend", {}),
    "torch-cuda": ("tempo.superopt.torch_backend", {"device": "cuda"}),
    "jax": ("tempo.superopt.jax_backend", {}),
    "numpy": ("tempo.superopt.numpy_backend", {}),
}
_default = {"backend": "torch"}
# Compiles per graph wherever graphs are timed against each other to decide between them (the
# never-slower check, the agent's final choice, refinement and polishing): where a compile's
# weights lie moves its speed by about 1%, so with one compile per graph its placement can decide.
DECISION_COMPILES = 8


def _known(backend: str) -> None:
    if backend not in BACKENDS:
        raise TempoError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")


def set_default_backend(backend: str) -> None:
    """Measure and run graphs on ``backend`` wherever no backend is named (TempoError for an
    unknown one, or for ``torch-cuda`` where torch sees no GPU)."""
    _known(backend)
    if BACKENDS[backend][1].get("device") == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise TempoError(f"backend '{backend}' needs a CUDA GPU, and torch sees none")
    _default["backend"] = backend


def default_backend() -> str:
    """The backend used where none is named (``torch`` unless :func:`set_default_backend`)."""
    return _default["backend"]


def _compiler(backend: str | None) -> Callable[[Graph], Callable[[Mapping[str, np.ndarray]], list]]:
    """``backend``'s ``compile_graph`` with its options (of an already folded graph)."""
    backend = backend or default_backend()
    _known(backend)
    module, options = BACKENDS[backend]
    return functools.partial(importlib.import_module(module).compile_graph, **options)


def compile_graph(graph: Graph, backend: str | None = None
                  ) -> Callable[[Mapping[str, np.ndarray]], list]:
    """``run(feeds) -> outputs`` for the constant-folded ``graph`` on ``backend``."""
    return _compiler(backend)(fold_constants(graph))


def run(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str | None = None
        ) -> list[np.ndarray]:
    """The graph's outputs on ``backend``, as NumPy arrays (copied from the device if need be:
    torch tensors have ``cpu()``, JAX and NumPy arrays convert as they are)."""
    return [np.asarray(o.cpu() if hasattr(o, "cpu") else o)
            for o in compile_graph(graph, backend)(feeds)]


def time_interleaved(graphs: Mapping[str, Graph], rounds: int = 5, repeats: int = 10,
                     backend: str | None = None, seed: int = 0, compiles: int = 1,
                     deadline: float | None = None) -> dict[str, Latency]:
    """Latencies of several graphs with the same inputs, timed in alternating rounds
    (:func:`time_calls`, which ``deadline`` is passed to).

    With ``compiles`` above 1 each graph is folded once, compiled that many
    times (at most ``rounds``: more would not be timed) and the rounds take
    the compiles in turn. Where a compile's weights lie in memory moves its
    speed by about 1% (pages, cache sets), and a compile keeps its placement;
    taking several compiles in turn puts that effect into the spread between
    rounds, where the verdict's interval sees it, instead of into the
    difference between two graphs.

    The compiles are made in batches, one compile of every graph a batch, each
    batch in a fresh random order (seeded by ``seed``), so that no graph's
    compiles always come after another's: made one graph after another, the
    last-made of two compiles of one graph came out faster in 646 of 1152
    compile pairs of the benchmark's A/A controls.
    """
    if compiles < 1:
        raise TempoError(f"compiles must be at least 1, not {compiles}")
    compile_folded = _compiler(backend)
    folded = {k: fold_constants(g) for k, g in graphs.items()}
    keys = list(folded)
    order = np.random.default_rng([seed, 1])      # not the rounds' order: another stream
    fns: dict[str, list] = {k: [] for k in keys}
    for _ in range(min(compiles, rounds)):
        for i in order.permutation(len(keys)):
            fns[keys[i]].append(compile_folded(folded[keys[i]]))
    feeds = random_feeds(next(iter(graphs.values())), seed)
    return time_calls({k: [functools.partial(fn, feeds) for fn in f] for k, f in fns.items()},
                      rounds, repeats, seed, deadline)


def time_calls(calls: Mapping[Hashable, Sequence[Callable[[], object]]], rounds: int = 5,
               repeats: int = 10, seed: int = 0, deadline: float | None = None
               ) -> dict[Hashable, Latency]:
    """Latencies of several calls, timed in alternating rounds.

    Each key has one call or several equivalent ones, which round ``r`` takes
    in turn (``r`` modulo their number). Each round runs every key's call once
    untimed, in a fresh random order (in a fixed order, the key warmed up last
    runs its first timed call with the freshest cache and comes out faster
    than the others more often than not), then ``repeats`` cycles, each
    calling every key once in a fresh random order (all orders seeded by
    ``seed``), so that sample ``i`` of every key was taken within one cycle:
    a shared machine's speed moves by up to 2x in phases of tens to hundreds
    of milliseconds, and two calls side by side share the phase that a block
    of ``repeats`` calls of one key, then of the next, does not.
    :func:`tempo.superopt.stats.round_ratios` pairs the samples cycle by
    cycle. The samples are stored round after round, cycle after cycle.

    With a ``deadline`` (a :func:`time.perf_counter` value) ``rounds`` is the
    most: the first round always runs, and no further round starts that would
    end past ``deadline`` at the pace of the rounds before it.
    :func:`timed_rounds` says how many ran.
    """
    samples: dict[Hashable, list[float]] = {k: [] for k in calls}
    keys = list(calls)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for r in range(rounds):
        if r and deadline is not None:
            now = time.perf_counter()
            if now + (now - start) / r > deadline:
                break
        now_calls = {k: calls[k][r % len(calls[k])] for k in keys}
        for k in (keys[i] for i in rng.permutation(len(keys))):
            now_calls[k]()
        for _ in range(repeats):
            for k in (keys[i] for i in rng.permutation(len(keys))):
                samples[k].append(time_call(now_calls[k]))
    return {k: Latency(tuple(v)) for k, v in samples.items()}


def timed_rounds(latency: Latency, repeats: int = 10) -> int:
    """How many rounds of :func:`time_calls` with ``repeats`` cycles gave ``latency``."""
    return len(latency.samples_ms) // repeats if repeats else 0


def measure_latency(graph: Graph, backend: str | None = None, warmup: int = 3, repeats: int = 20,
                    seed: int = 0) -> Latency:
    """End-to-end inference latency of ``graph`` on random inputs (warm-up, repeats, median)."""
    fn = compile_graph(graph, backend)
    feeds = random_feeds(graph, seed)
    return time_runs(lambda: fn(feeds), warmup, repeats)
