"""Deciding whether one graph is faster than another beyond measurement noise.

Both graphs are timed in the same interleaved rounds
(:func:`~tempo.superopt.execute.time_interleaved`), so each round gives a
paired ratio of their median run times, and load that drifts between rounds
affects both sides of a ratio alike. The verdict bootstraps the median of
those per-round ratios: a *win* when the whole 95% interval lies above 1 (the
challenger is faster), a *loss* when it lies below 1, a *tie* otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.superopt.latency import Latency


@dataclass(frozen=True)
class Verdict:
    """``reference / challenger`` median latency ratio with its bootstrap 95% interval."""

    ratio: float
    low: float
    high: float

    @property
    def outcome(self) -> str:
        """``win`` (challenger faster), ``loss`` (slower) or ``tie`` (within noise)."""
        if self.low > 1.0:
            return "win"
        if self.high < 1.0:
            return "loss"
        return "tie"


def round_medians(latency: Latency, rounds: int) -> np.ndarray:
    """The median of each round's samples (the samples are stored round after round)."""
    return np.median(np.asarray(latency.samples_ms).reshape(rounds, -1), axis=1)


def paired_verdict(reference: Latency, challenger: Latency, rounds: int, resamples: int = 4000,
                   seed: int = 0) -> Verdict:
    """Is ``challenger`` faster than ``reference``? Bootstrap over paired per-round ratios."""
    ratios = round_medians(reference, rounds) / round_medians(challenger, rounds)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, rounds, size=(resamples, rounds))
    boot = np.median(ratios[picks], axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Verdict(float(np.median(ratios)), float(low), float(high))
