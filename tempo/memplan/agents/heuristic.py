"""A production-style heuristic in the spirit of XLA's memory-space assignment.

Buffers (alias groups as one unit) are taken in order of benefit per byte, the
most memory-bound first. Each is prefetched as late as its copy allows (or
evicted as early as it allows), at the best-fitting free offset; an operand
whose tensor is already resident at its use reuses that allocation; anything
that does not fit stays in slow memory. Unlike the game it is not bound to
chronological order or to lowest offsets: it is a different solver whose
answers the validator checks all the same.
"""
from __future__ import annotations

from collections import defaultdict

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.occupancy import OffsetIndex
from tempo.memplan.problem import Buffer, Decision, Instance, Solution
from tempo.memplan.supply import CopyLedger, CopyPlan
from tempo.memplan.validate import placed_reward


class _Allocator:
    def __init__(self, inst: Instance):
        self.inst = inst
        self.memory = OffsetIndex(inst.capacity, inst.num_steps)
        self.ledger = CopyLedger(inst.supply)
        self.resident: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
        self.decisions: dict[int, Decision] = {}

    def _reuse(self, i: int, b: Buffer) -> Decision | None:
        for start, end, offset, j in self.resident[b.tensor_id]:
            if j < i and start < b.target_time <= end:
                return Decision(b.id, "nocopy", offset, None)
        return None

    def _copy(self, b: Buffer) -> tuple[tuple[int, int], CopyPlan] | None:
        if b.is_output:
            plan = self.ledger.plan_evict(b.target_time, b.demand, self.inst.num_steps - 1)
            return None if plan is None else ((b.target_time, max(plan.last, b.target_time)), plan)
        plan = self.ledger.plan_prefetch(b.target_time, b.demand, b.live_range[0])
        return None if plan is None else ((min(plan.first, b.target_time), b.target_time), plan)

    def place_single(self, i: int, b: Buffer) -> None:
        reuse = None if b.is_output else self._reuse(i, b)
        if reuse is not None:
            self.decisions[i] = reuse
            return
        copy = self._copy(b)
        choices = [] if copy is None else [("copy", *copy)]
        if b.is_output:
            choices.append(("nocopy", b.live_range, None))
        for action, interval, plan in choices:
            offset = self.memory.best_fit(b.size, *interval)
            if offset is not None:
                self._commit(i, b, Decision(b.id, action, offset, interval), plan)
                return

    def place_group(self, members: list[int]) -> None:
        planned = []
        for i in members:
            b = self.inst.buffers[i]
            copy = self._copy(b)
            if copy is None:
                break
            self.ledger.commit(copy[1])
            planned.append((i, b, *copy))
        if len(planned) == len(members):
            offset = self._common_offset(planned)
            if offset is not None:
                for i, b, interval, plan in planned:
                    self.ledger.commit(plan, sign=-1)
                    self._commit(i, b, Decision(b.id, "copy", offset, interval), plan)
                return
        for _, _, _, plan in planned:
            self.ledger.commit(plan, sign=-1)

    def _common_offset(self, planned) -> int | None:
        candidates = sorted({lo for _, b, iv, _ in planned
                             for lo, hi in self.memory.gaps(*iv) if hi - lo >= b.size})
        for offset in candidates:
            if all(self.memory.fits(offset, b.size, *iv) for _, b, iv, _ in planned):
                return offset
        return None

    def _commit(self, i, b, d: Decision, plan) -> None:
        self.decisions[i] = d
        self.memory.add(i, d.offset, b.size, *d.interval)
        if plan is not None:
            self.ledger.commit(plan)
        self.resident[b.tensor_id].append((*d.interval, d.offset, i))


def heuristic_solution(inst: Instance) -> Solution:
    """The heuristic's solution of ``inst``."""
    groups: dict[int, list[int]] = defaultdict(list)
    units: list[list[int]] = []
    for i, b in enumerate(inst.buffers):
        if b.alias_id is None:
            units.append([i])
        else:
            groups[b.alias_id].append(i)
    units.extend(groups.values())

    def density(unit: list[int]) -> float:
        bs = [inst.buffers[i] for i in unit]
        return sum(b.benefit for b in bs) / sum(b.size for b in bs)

    alloc = _Allocator(inst)
    for unit in sorted(units, key=lambda u: (-density(u), u[0])):
        if density(unit) <= 0:
            continue
        if len(unit) == 1 and inst.buffers[unit[0]].alias_id is None:
            alloc.place_single(unit[0], inst.buffers[unit[0]])
        else:
            alloc.place_group(unit)
    decisions = tuple(alloc.decisions.get(i, Decision(b.id, "drop", None, None))
                      for i, b in enumerate(inst.buffers))
    placed = {d.buffer for d in decisions if d.action != "drop"}
    return Solution(decisions, placed_reward(inst, placed))


def solve(inst: Instance, budget_seconds: float = 0.0, seed: int = 0) -> SearchResult:
    """One deterministic pass (the budget and seed are not needed)."""
    tracker = Tracker(inst, budget_seconds)
    tracker.offer_solution(heuristic_solution(inst))
    return tracker.result()
