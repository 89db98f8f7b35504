"""Deciding whether one graph is faster than another beyond measurement noise.

Both graphs are timed in the same interleaved rounds
(:func:`~tempo.superopt.execute.time_interleaved`: every round a number of
cycles, each calling every graph once in a fresh random order), so each cycle
gives a paired ratio of two run times taken side by side and each round the
median of its cycles' ratios; the machine's speed, which moves by up to 2x
in phases of tens to hundreds of milliseconds, affects both sides of a ratio
alike. The verdict takes the distribution-free 95% interval of the median of
those per-round ratios (order statistics, the sign test's interval: exact for
rounds that are independent and alike, whatever the distribution of the
ratios): a *win* when the whole interval lies above 1 (the challenger is
faster), a *loss* when it lies below 1, a *tie* otherwise.

The order of the graphs is random in every cycle because a fixed order is
biased: timing one graph under two names (an A/A test, squeezenet, 30 pairs
of 40 rounds) in a fixed cyclic order, the name that ran second was faster
in 28 of 30 pairs, and 8 of 30 identical pairs were called a win or a loss.

When each graph is compiled several times and the rounds take the compiles
in turn (``time_interleaved(compiles=C)``), rounds that share a pair of
compiles are not independent: a compile's placement in memory moves its speed
for every round it runs. The unit is then the compile pair: the verdict takes
the median ratio of each pair's rounds, ``C`` values, and the interval of
their median. Over eight six-workload reports of ``benchmarks/superopt/speedups.py``
(120 rounds, 24 compiles), the A/A controls were called a win or a loss 7
times in 48 per round and 2 times in 48 per compile pair (2.4 expected at 95%).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.latency import Latency


@dataclass(frozen=True)
class Verdict:
    """``reference / challenger`` median latency ratio with its 95% interval."""

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

    def record(self) -> dict:
        """The verdict as the benchmarks' JSON records it: ratio, 95% interval and outcome."""
        return {"ratio": self.ratio, "ci95": [self.low, self.high], "verdict": self.outcome}


def round_medians(latency: Latency, rounds: int) -> np.ndarray:
    """The median of each round's samples (the samples are stored round after round)."""
    return np.median(np.asarray(latency.samples_ms).reshape(rounds, -1), axis=1)


def median_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The distribution-free interval for the median of ``values``: the order statistics ``k``
    and ``n + 1 - k`` for the largest ``k`` with ``P(Binomial(n, 1/2) < k) <= (1 - level) / 2``.
    With fewer than 6 values no such ``k`` exists at 95% and the interval is their range."""
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    below, k = 0.0, 1                       # below = P(Binomial(n, 1/2) < k)
    while k < n and below + math.comb(n, k - 1) / 2 ** n <= (1 - level) / 2:
        below += math.comb(n, k - 1) / 2 ** n
        k += 1
    k = max(k - 1, 1)
    return float(ordered[k - 1]), float(ordered[n - k])


def sign_test_p(above: int, n: int) -> float:
    """The two-sided p-value of the sign test: ``above`` of ``n`` values on one side of the
    median under the hypothesis that each side is equally likely."""
    if not 0 <= above <= n:
        raise TempoError(f"{above} of {n} values cannot lie above the median")
    extreme = max(above, n - above)
    tail = sum(math.comb(n, k) for k in range(extreme, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def compile_pair_medians(ratios: np.ndarray, compiles: int) -> np.ndarray:
    """The median of each compile pair's per-round ``ratios``, where round ``r`` ran compile
    ``r % C`` of both graphs and ``C = min(compiles, rounds)``
    (:func:`~tempo.superopt.execute.time_interleaved`)."""
    count = min(compiles, len(ratios))
    return np.array([np.median(ratios[k::count]) for k in range(count)])


def round_ratios(reference: Latency, challenger: Latency, rounds: int) -> np.ndarray:
    """Per round, the median of the cycle-paired ratios ``reference / challenger``: sample ``i``
    of both was taken in one cycle of :func:`~tempo.superopt.execute.time_calls`, side by side,
    where the machine's speed phase is shared."""
    ref, chal = np.asarray(reference.samples_ms), np.asarray(challenger.samples_ms)
    if ref.shape != chal.shape:
        raise TempoError(f"paired samples differ in number: {ref.size} against {chal.size}")
    return np.median((ref / chal).reshape(rounds, -1), axis=1)


def paired_speedup(reference: Latency, challenger: Latency, rounds: int) -> float:
    """How much faster ``challenger`` ran than ``reference``: the median of their
    :func:`round_ratios` (above 1: faster)."""
    return float(np.median(round_ratios(reference, challenger, rounds)))


def ratio_verdict(ratios: np.ndarray, compiles: int = 1) -> Verdict:
    """The median of per-round ``ratios`` and its distribution-free 95% interval; with
    ``compiles`` above 1, of the ratios' medians per compile pair (:func:`compile_pair_medians`)."""
    if compiles < 1:
        raise TempoError(f"compiles must be at least 1, not {compiles}")
    if compiles > 1:
        ratios = compile_pair_medians(ratios, compiles)
    low, high = median_interval(ratios)
    return Verdict(float(np.median(ratios)), low, high)


def paired_verdict(reference: Latency, challenger: Latency, rounds: int,
                   compiles: int = 1) -> Verdict:
    """Is ``challenger`` faster than ``reference``? :func:`ratio_verdict` of their
    :func:`round_ratios`."""
    return ratio_verdict(round_ratios(reference, challenger, rounds), compiles)
