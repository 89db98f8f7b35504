"""End-to-end latency: warm-up runs, then timed repeats, reported by their median."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Latency:
    """Timings of repeated runs, in milliseconds."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        """The median run time."""
        return float(np.median(self.samples_ms))

    @property
    def min_ms(self) -> float:
        """The fastest run: on a shared machine, other load only ever adds time to a run, so
        the minimum is the estimate least disturbed by it (ranking graphs, not reporting)."""
        return float(np.min(self.samples_ms))

    @property
    def iqr_ms(self) -> float:
        """The interquartile range of the run times (the spread of the middle half)."""
        return float(np.subtract(*np.percentile(self.samples_ms, [75, 25])))


def time_call(run: Callable[[], object]) -> float:
    """The milliseconds one call of ``run`` takes."""
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def time_runs(run: Callable[[], object], warmup: int = 3, repeats: int = 20) -> Latency:
    """Call ``run`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        run()
    return Latency(tuple(time_call(run) for _ in range(repeats)))
