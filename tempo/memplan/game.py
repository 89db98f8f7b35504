"""The MMapGame dynamics (MMap-MuZero §4.2 and Appendix A), with undo.

The game visits buffers in chronological order; for each it takes one of
Copy / NoCopy / Drop:

- **Copy** allocates the buffer for ``I(b) = [s, target_time]`` (an operand;
  ``s`` the latest start whose copy steps ``[s, target_time)`` cover the demand
  with remaining supply and share at most one step with any other copy, and
  ``s >= live_range.start``, since a value cannot be fetched before it exists)
  or ``[target_time, e]`` (an output; ``e`` the earliest end ``<= T - 1`` whose
  copy steps ``(target_time, e]`` cover the demand), at the lowest offset free
  throughout ``I(b)``.
- **NoCopy** reuses a previous allocation of the same tensor. For an operand it
  is legal only when a same-tensor allocation starts before ``target_time``;
  with ``s`` the latest step up to ``target_time`` inside such an allocation,
  ``I(b) = (s, target_time]`` at the lowest free offset, or no new allocation
  at all (the covering allocation's offset) when ``s == target_time``. For an
  output, ``I(b) = live_range(b)`` (it stays in fast memory, never evicted).
- **Drop** leaves the buffer in slow memory.

Buffers of one alias group share one offset and one decision (all Drop, or all
in fast memory); being the same memory, their allocations may overlap each other. Placing a buffer earns its benefit; with latency tables the
benefit is ``L(B') - L(B' + b)`` over the buffers ``B'`` of its instruction
already in fast memory. An illegal action, or a state with no legal action,
ends the game lost with a reward that brings the return to zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.memplan.occupancy import OffsetIndex
from tempo.memplan.problem import Decision, Instance, Solution
from tempo.memplan.supply import CopyLedger, CopyPlan

COPY, NOCOPY, DROP = 0, 1, 2
ACTION_NAMES = ("copy", "nocopy", "drop")


@dataclass(frozen=True)
class Placement:
    """Where an action puts the current buffer: offset and interval (None for Drop / reuse)."""

    offset: int | None
    interval: tuple[int, int] | None
    plan: CopyPlan | None = None


_DROPPED = Placement(None, None)


@dataclass
class _Step:
    """What one move changed, so it can be undone."""

    action: int
    placement: Placement
    reward: float
    alias_set: bool
    table_bit: tuple[int, int] | None
    closed_group: bool
    opened_group: bool


def held(size: int, interval: tuple[int, int]) -> int:
    """Fast memory an allocation of ``size`` bytes over ``interval`` (inclusive) holds, in bytes x steps."""
    return size * (interval[1] - interval[0] + 1)


class GameState:
    """A game in progress on one instance: apply moves with :meth:`step`, take them back with :meth:`undo`."""

    def __init__(self, inst: Instance):
        self.inst = inst
        self.buffers = inst.buffers
        self.num_steps = inst.num_steps
        self.memory = OffsetIndex(inst.capacity, inst.num_steps)
        self.ledger = CopyLedger(inst.supply)
        self._alias_last = {}
        for i, b in enumerate(self.buffers):
            if b.alias_id is not None:
                self._alias_last[b.alias_id] = i
        self._tables = [np.asarray(t.latency, np.float64) for t in inst.latencies]
        self._table_of: dict[int, tuple[int, int]] = {}
        index_of = {b.id: i for i, b in enumerate(self.buffers)}
        for k, table in enumerate(inst.latencies):
            for bit, bid in enumerate(table.buffers):
                self._table_of[index_of[bid]] = (k, 1 << bit)
        self.reset()

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Back to the first buffer with nothing placed."""
        self.memory = OffsetIndex(self.inst.capacity, self.num_steps)
        self.ledger = CopyLedger(self.inst.supply)
        self.index = 0
        self.total = 0.0
        self.reserved = 0.0   # fast memory held by the placements so far, in bytes x steps
        self.lost = False
        self.history: list[_Step] = []
        self.alias: dict[int, int | None] = {}       # alias id -> offset (None: dropped)
        self.members: dict[int, set[int]] = {}       # alias id -> allocation keys (same memory)
        self.tensor: dict[int, list[tuple[int, int, int]]] = {}  # tensor -> [(start, end, offset)]
        self.masks = [0] * len(self._tables)
        self.open_groups = 0
        self._options: list[Placement | None] | None = None

    @property
    def done(self) -> bool:
        """Whether every buffer has a decision or the game is lost."""
        return self.lost or self.index >= len(self.buffers)

    @property
    def current(self):
        """The buffer to decide now."""
        return self.buffers[self.index]

    def can_drop_rest(self) -> bool:
        """No alias group placed in fast memory has undecided buffers: dropping the rest completes the game (§4.3.2)."""
        return self.open_groups == 0

    # ------------------------------------------------------------------ actions

    def options(self) -> list[Placement | None]:
        """The placement of Copy, NoCopy and Drop for the current buffer (None: illegal)."""
        if self._options is None:
            self._options = self._compute_options() if not self.done else [None, None, None]
        return self._options

    def legal(self) -> np.ndarray:
        """Boolean mask of legal actions (Copy, NoCopy, Drop)."""
        return np.array([o is not None for o in self.options()])

    def _compute_options(self) -> list[Placement | None]:
        b = self.current
        if b.alias_id is not None and b.alias_id in self.alias:
            fixed = self.alias[b.alias_id]
            if fixed is None:
                return [None, None, Placement(None, None)]
            return [self._copy(b, fixed), self._nocopy(b, fixed), None]
        return [self._copy(b, None), self._nocopy(b, None), Placement(None, None)]

    def _offset(self, b, interval: tuple[int, int], fixed: int | None) -> int | None:
        if fixed is None:
            return self.memory.lowest_fit(b.size, *interval)
        shared = self.members.get(b.alias_id, frozenset())
        return fixed if self.memory.fits(fixed, b.size, *interval, shared) else None

    def _copy(self, b, fixed: int | None) -> Placement | None:
        if b.is_output:
            plan = self.ledger.plan_evict(b.target_time, b.demand, self.num_steps - 1)
            interval = None if plan is None else (b.target_time, max(plan.last, b.target_time))
        else:
            plan = self.ledger.plan_prefetch(b.target_time, b.demand, b.live_range[0])
            interval = None if plan is None else (min(plan.first, b.target_time), b.target_time)
        if plan is None:
            return None
        offset = self._offset(b, interval, fixed)
        return None if offset is None else Placement(offset, interval, plan)

    def _nocopy(self, b, fixed: int | None) -> Placement | None:
        if b.is_output:
            offset = self._offset(b, b.live_range, fixed)
            return None if offset is None else Placement(offset, b.live_range)
        best, covering = -1, None
        for start, end, offset in self.tensor.get(b.tensor_id, ()):
            if start < b.target_time and min(end, b.target_time) >= best:
                best = min(end, b.target_time)
                if end >= b.target_time:
                    covering = offset
        if best < 0:
            return None
        if best == b.target_time:
            ok = fixed is None or fixed == covering
            return Placement(covering, None) if ok else None
        interval = (best + 1, b.target_time)
        offset = self._offset(b, interval, fixed)
        return None if offset is None else Placement(offset, interval)

    # ------------------------------------------------------------------ moves

    def step(self, action: int) -> float:
        """Apply ``action`` to the current buffer; returns the reward of the move."""
        if self.done:
            raise ValueError("the game is over")
        placement = self.options()[action]
        if placement is None:
            return self._lose()
        b = self.current
        reward, table_bit, alias_set = 0.0, None, False
        if action != DROP:
            reward = self._benefit(self.index)
            table_bit = self._table_of.get(self.index)
            if table_bit is not None:
                self.masks[table_bit[0]] |= table_bit[1]
            if placement.interval is not None:
                self.memory.add(self.index, placement.offset, b.size, *placement.interval)
                self.reserved += held(b.size, placement.interval)
                if b.alias_id is not None:
                    self.members.setdefault(b.alias_id, set()).add(self.index)
                self.tensor.setdefault(b.tensor_id, []).append((*placement.interval, placement.offset))
            if placement.plan is not None:
                self.ledger.commit(placement.plan)
        if b.alias_id is not None and b.alias_id not in self.alias:
            self.alias[b.alias_id] = placement.offset if action != DROP else None
            alias_set = True
        grouped = b.alias_id is not None and action != DROP
        opened = grouped and alias_set and self._alias_last[b.alias_id] > self.index
        closed = grouped and not alias_set and self._alias_last[b.alias_id] == self.index
        self.open_groups += int(opened) - int(closed)
        self.history.append(_Step(action, placement, reward, alias_set, table_bit, closed, opened))
        self.total += reward
        self.index += 1
        self._options = None
        if not self.done and not self.legal().any():
            return reward + self._lose()
        return reward

    def _lose(self) -> float:
        penalty = -self.total
        self.lost = True
        self.total = 0.0
        self._options = None
        return penalty

    def _benefit(self, i: int) -> float:
        where = self._table_of.get(i)
        if where is None:
            return self.buffers[i].benefit
        k, bit = where
        table, mask = self._tables[k], self.masks[k]
        return float(table[mask] - table[mask | bit])

    def undo(self) -> None:
        """Take back the last move (or the loss that ended the game)."""
        if self.lost:
            self.lost = False
            self.total = sum(s.reward for s in self.history)
            self._options = None
            return
        s = self.history.pop()
        self.index -= 1
        b = self.current
        if s.action != DROP:
            if s.table_bit is not None:
                self.masks[s.table_bit[0]] &= ~s.table_bit[1]
            if s.placement.interval is not None:
                self.memory.remove(self.index)
                self.reserved -= held(b.size, s.placement.interval)
                self.members.get(b.alias_id, set()).discard(self.index)
                self.tensor[b.tensor_id].pop()
            if s.placement.plan is not None:
                self.ledger.commit(s.placement.plan, sign=-1)
        if s.alias_set:
            del self.alias[b.alias_id]
        self.open_groups -= int(s.opened_group) - int(s.closed_group)
        self.total -= s.reward
        self._options = None

    def drop_rest(self) -> None:
        """Drop every remaining buffer without searching for placements (needs :meth:`can_drop_rest`)."""
        if self.lost or not self.can_drop_rest():
            raise ValueError("an alias group placed in fast memory still has undecided buffers")
        for b in self.buffers[self.index:]:
            alias_set = b.alias_id is not None and b.alias_id not in self.alias
            if alias_set:
                self.alias[b.alias_id] = None
            self.history.append(_Step(DROP, _DROPPED, 0.0, alias_set, None, False, False))
        self.index = len(self.buffers)
        self._options = None

    def rewind(self, index: int) -> None:
        """Undo moves until ``index`` buffers are decided."""
        if self.lost:
            self.undo()
        while self.index > index:
            self.undo()

    # ------------------------------------------------------------------ output

    def solution(self) -> Solution:
        """The decisions taken so far as a solution (complete when the game is won)."""
        decisions = []
        for b, s in zip(self.buffers, self.history):
            p = s.placement
            decisions.append(Decision(b.id, ACTION_NAMES[s.action],
                                      None if s.action == DROP else p.offset, p.interval))
        return Solution(tuple(decisions), self.total)


def play(inst: Instance, actions) -> GameState:
    """A fresh game on ``inst`` after applying ``actions`` in order."""
    game = GameState(inst)
    for a in actions:
        game.step(a)
    return game
