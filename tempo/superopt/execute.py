"""Run a graph on a backend and measure its end-to-end latency.

Backends are a registry of ``compile_graph(graph) -> run(feeds)`` functions,
imported lazily so that the NumPy-only parts never load torch or JAX. Every
run constant-folds first (:mod:`tempo.superopt.fold`).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.fold import fold_constants
from tempo.superopt.graph import Graph
from tempo.superopt.latency import Latency, time_runs
from tempo.superopt.reference import random_feeds

BACKENDS = {"torch": "tempo.superopt.torch_backend", "jax": "tempo.superopt.jax_backend"}


def compile_graph(graph: Graph, backend: str = "torch") -> Callable[[Mapping[str, np.ndarray]], list]:
    """``run(feeds) -> outputs`` for the constant-folded ``graph`` on ``backend``."""
    if backend not in BACKENDS:
        raise TempoError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
    module = importlib.import_module(BACKENDS[backend])
    return module.compile_graph(fold_constants(graph))


def run(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str = "torch") -> list[np.ndarray]:
    """The graph's outputs on ``backend``, as NumPy arrays."""
    return [np.asarray(o) for o in compile_graph(graph, backend)(feeds)]


def time_interleaved(graphs: Mapping[str, Graph], rounds: int = 5, repeats: int = 10,
                     backend: str = "torch", seed: int = 0) -> dict[str, Latency]:
    """Latencies of several graphs with the same inputs, timed in alternating rounds.

    Each round runs every graph ``repeats`` times (after one warm-up run), in a
    fresh random order (seeded by ``seed``), so all share the same background
    noise and no graph always follows the same one: in a fixed order the
    graph that ran second was measurably faster in an A/A test, a bias that
    did not average out (see :mod:`tempo.superopt.stats`). The samples of all rounds
    are pooled, round after round.
    """
    fns = {k: compile_graph(g, backend) for k, g in graphs.items()}
    feeds = random_feeds(next(iter(graphs.values())), seed)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        for k in (keys[i] for i in rng.permutation(len(keys))):
            samples[k].extend(time_runs(lambda: fns[k](feeds), 1, repeats).samples_ms)
    return {k: Latency(tuple(v)) for k, v in samples.items()}


def measure_latency(graph: Graph, backend: str = "torch", warmup: int = 3, repeats: int = 20,
                    seed: int = 0) -> Latency:
    """End-to-end inference latency of ``graph`` on random inputs (warm-up, repeats, median)."""
    fn = compile_graph(graph, backend)
    feeds = random_feeds(graph, seed)
    return time_runs(lambda: fn(feeds), warmup, repeats)
