"""The copy-bandwidth resource of the game: remaining supply per step and copy intervals.

A copy of buffer ``b`` uses the supply of a contiguous run of logical steps
(``copy(b)`` in Appendix A) whose supply covers ``demand(b)`` (Eq. 5), and two
copy intervals share at most one step (Eq. 6). Supply used by a copy is
subtracted from ``remaining`` (the vector ``W_t`` of §4.2). ``pairs[t]`` counts
the copy intervals holding both steps ``t`` and ``t + 1``: a new interval
violates Eq. 6 exactly when it holds such a pair too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-9


@dataclass(frozen=True)
class CopyPlan:
    """A copy over steps ``[first, last]`` using ``usage[i]`` supply at step ``first + i``."""

    first: int
    last: int
    usage: np.ndarray


def covers(total: float, demand: float) -> bool:
    """Whether supply ``total`` covers ``demand`` (with a relative tolerance)."""
    return total >= demand - EPS * max(1.0, demand)


class CopyLedger:
    """Remaining supply and the copy intervals committed so far."""

    def __init__(self, supply):
        self.remaining = np.asarray(supply, np.float64).copy()
        self.pairs = np.zeros(max(len(self.remaining) - 1, 1), np.int32)

    def _free_of_pairs(self, first: int, last: int) -> bool:
        return last <= first or not self.pairs[first:last].any()

    def plan_prefetch(self, target: int, demand: float, earliest: int) -> CopyPlan | None:
        """Copy into fast memory before ``target``: the latest start ``>= earliest`` (Appendix A).

        Uses the supply of the latest steps first. Returns None when Eq. 5 and 6
        cannot both hold.
        """
        if demand <= 0:
            return CopyPlan(target, target - 1, np.zeros(0))
        taken = _take(self.remaining[earliest:target][::-1], demand)
        if taken is None:
            return None
        k, usage = taken
        first = target - 1 - k
        if not self._free_of_pairs(first, target - 1):
            return None
        return CopyPlan(first, target - 1, np.minimum(usage[::-1], self.remaining[first:target]))

    def plan_evict(self, target: int, demand: float, latest: int) -> CopyPlan | None:
        """Copy out of fast memory after ``target``: the earliest end ``<= latest`` (Appendix A)."""
        if demand <= 0:
            return CopyPlan(target + 1, target, np.zeros(0))
        taken = _take(self.remaining[target + 1: latest + 1], demand)
        if taken is None:
            return None
        k, usage = taken
        last = target + 1 + k
        if not self._free_of_pairs(target + 1, last):
            return None
        return CopyPlan(target + 1, last, np.minimum(usage, self.remaining[target + 1: last + 1]))

    def commit(self, plan: CopyPlan, sign: int = 1) -> None:
        """Use the plan's supply (``sign=1``) or give it back (``sign=-1``)."""
        if plan.last < plan.first:
            return
        self.remaining[plan.first: plan.last + 1] -= sign * plan.usage
        self.pairs[plan.first: plan.last] += sign


def _take(window: np.ndarray, demand: float) -> tuple[int, np.ndarray] | None:
    """Use ``window``'s supply in order until ``demand`` is met: ``(last index used, usage)``, or None."""
    if window.size == 0:
        return None
    total = np.cumsum(window)
    k = int(np.searchsorted(total, demand - EPS * max(1.0, demand)))
    if k >= window.size:
        return None
    usage = window[: k + 1].copy()
    usage[k] = demand - (total[k - 1] if k else 0.0)
    return k, usage
