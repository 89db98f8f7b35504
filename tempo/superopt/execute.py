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


def measure_latency(graph: Graph, backend: str = "torch", warmup: int = 3, repeats: int = 20,
                    seed: int = 0) -> Latency:
    """End-to-end inference latency of ``graph`` on random inputs (warm-up, repeats, median)."""
    fn = compile_graph(graph, backend)
    feeds = random_feeds(graph, seed)
    return time_runs(lambda: fn(feeds), warmup, repeats)
