"""An independent check of a complete solution against every constraint of the problem.

It shares no code with the game: it rebuilds allocations, copy intervals and
the reward from the decisions alone. Constraints, in the order they are checked
(each violation names its constraint):

``coverage``   one decision per buffer;
``shape``      Drop has no offset/interval, Copy has both, NoCopy has an offset;
``capacity``   ``0 <= offset`` and ``offset + size <= capacity``;
``interval``   the interval an action implies (Appendix A): Copy of an operand
               ends at its target time and starts within its live range, Copy of
               an output starts at its target time, NoCopy of an output is its
               live range, NoCopy of an operand continues an earlier allocation
               of the same tensor (or reuses one covering the target time);
``alias``      one alias group: all Drop or all placed, at one offset (Eq. 4);
``overlap``    no two allocations share a memory cell at a time step (buffers of
               one alias group are the same memory and may);
``copy-overlap`` two copy intervals share at most one step (Eq. 6);
``supply``     the copies' demands fit in the per-step supply (Eq. 5);
``reward``     the claimed reward equals the benefit of the placed buffers.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from tempo.memplan.problem import Instance, Solution

TOLERANCE = 1e-6


class Violation(Exception):
    """The first constraint a solution breaks: ``constraint`` and a message naming the buffer."""

    def __init__(self, constraint: str, message: str):
        super().__init__(f"{constraint}: {message}")
        self.constraint = constraint


def validate(inst: Instance, sol: Solution) -> None:
    """Raise :class:`Violation` for the first violated constraint; return None if valid."""
    decision = _coverage(inst, sol)
    for b in inst.buffers:
        _shape_and_capacity(inst, b, decision[b.id])
    _intervals(inst, decision)
    _alias(inst, decision)
    _overlap(inst, decision)
    copies = _copy_intervals(inst, decision)
    _copy_overlap(copies)
    _supply(inst, copies)
    _reward(inst, decision, sol.reward)


def is_valid(inst: Instance, sol: Solution) -> bool:
    """Whether ``sol`` satisfies every constraint."""
    try:
        validate(inst, sol)
    except Violation:
        return False
    return True


def _coverage(inst, sol):
    ids = {b.id for b in inst.buffers}
    decision = {}
    for d in sol.decisions:
        if d.buffer not in ids:
            raise Violation("coverage", f"decision for unknown buffer {d.buffer}")
        if d.buffer in decision:
            raise Violation("coverage", f"buffer {d.buffer} has more than one decision")
        decision[d.buffer] = d
    for b in inst.buffers:
        if b.id not in decision:
            raise Violation("coverage", f"buffer {b.id} has no decision")
    return decision


def _shape_and_capacity(inst, b, d):
    if d.action == "drop" and (d.offset is not None or d.interval is not None):
        raise Violation("shape", f"buffer {b.id}: drop must have offset and interval null")
    if d.action == "copy" and (d.offset is None or d.interval is None):
        raise Violation("shape", f"buffer {b.id}: copy needs an offset and an interval")
    if d.action == "nocopy" and (d.offset is None or (b.is_output and d.interval is None)):
        raise Violation("shape", f"buffer {b.id}: nocopy needs an offset"
                        + (" and an interval" if b.is_output else ""))
    if d.offset is not None and not 0 <= d.offset <= inst.capacity - b.size:
        raise Violation("capacity", f"buffer {b.id}: offset {d.offset} + size {b.size} "
                        f"is outside fast memory of capacity {inst.capacity}")


def _intervals(inst, decision):
    placed_by_tensor = defaultdict(list)   # tensor -> [(start, end, offset)] of earlier buffers
    last_step = inst.num_steps - 1
    for b in inst.buffers:
        d = decision[b.id]
        tt, live0 = b.target_time, b.live_range[0]
        iv = d.interval
        if d.action == "copy" and not b.is_output and not (iv[1] == tt and live0 <= iv[0] <= tt):
            raise Violation("interval", f"buffer {b.id}: copy of an operand must span "
                            f"[s, {tt}] with {live0} <= s, got {list(iv)}")
        if d.action == "copy" and b.is_output and not (iv[0] == tt and tt <= iv[1] <= last_step):
            raise Violation("interval", f"buffer {b.id}: copy of an output must span "
                            f"[{tt}, e] with e <= {last_step}, got {list(iv)}")
        if d.action == "nocopy" and b.is_output and iv != b.live_range:
            raise Violation("interval", f"buffer {b.id}: nocopy of an output must span its "
                            f"live range {list(b.live_range)}, got {list(iv)}")
        if d.action == "nocopy" and not b.is_output:
            _continues(b, d, placed_by_tensor[b.tensor_id])
        if d.action != "drop" and iv is not None:
            placed_by_tensor[b.tensor_id].append((iv[0], iv[1], d.offset))


def _continues(b, d, earlier):
    tt = b.target_time
    if d.interval is None:
        if not any(s < tt <= e and off == d.offset for s, e, off in earlier):
            raise Violation("interval", f"buffer {b.id}: nocopy without an interval needs an "
                            f"earlier allocation of tensor {b.tensor_id} at offset {d.offset} "
                            f"covering step {tt}")
        return
    start, end = d.interval
    if end != tt or start > tt:
        raise Violation("interval", f"buffer {b.id}: nocopy of an operand must end at its "
                        f"target time {tt}, got {list(d.interval)}")
    if not any(s < tt and s <= start - 1 <= e for s, e, _ in earlier):
        raise Violation("interval", f"buffer {b.id}: nocopy interval {list(d.interval)} does "
                        f"not continue an earlier allocation of tensor {b.tensor_id}")


def _alias(inst, decision):
    groups = defaultdict(list)
    for b in inst.buffers:
        if b.alias_id is not None:
            groups[b.alias_id].append(decision[b.id])
    for gid, ds in groups.items():
        kinds = {d.action == "drop" for d in ds}
        if len(kinds) > 1:
            raise Violation("alias", f"alias group {gid} mixes drop with placement "
                            f"(buffers {[d.buffer for d in ds]})")
        offsets = {d.offset for d in ds}
        if len(offsets) > 1:
            raise Violation("alias", f"alias group {gid} uses several offsets {sorted(offsets)}")


def _overlap(inst, decision):
    size = {b.id: b.size for b in inst.buffers}
    alias = {b.id: b.alias_id for b in inst.buffers}
    rects = sorted((d.interval[0], d.interval[1], d.offset, d.offset + size[d.buffer], d.buffer)
                   for d in decision.values() if d.action != "drop" and d.interval is not None)
    active: list[tuple] = []
    for rect in rects:
        start, _, lo, hi, bid = rect
        active = [a for a in active if a[1] >= start]
        for a in active:
            same_memory = alias[bid] is not None and alias[bid] == alias[a[4]]
            if a[2] < hi and lo < a[3] and not same_memory:
                raise Violation("overlap", f"buffers {a[4]} and {bid} share memory "
                                f"[{max(lo, a[2])}, {min(hi, a[3])}) at step {start}")
        active.append(rect)


def _copy_intervals(inst, decision):
    """(first step, last step, demand, buffer) of each copy with a non-empty copy interval."""
    out = []
    for b in inst.buffers:
        d = decision[b.id]
        if d.action != "copy":
            continue
        first, last = ((b.target_time + 1, d.interval[1]) if b.is_output
                       else (d.interval[0], b.target_time - 1))
        if b.demand > 0 and last < first:
            raise Violation("supply", f"buffer {b.id}: copy of demand {b.demand} has no copy steps")
        if last >= first:
            out.append((first, last, b.demand, b.id))
    return out


def _copy_overlap(copies):
    reach, owner = -1, None
    for first, last, _, bid in sorted(copies):
        if first + 1 <= min(last, reach):
            raise Violation("copy-overlap", f"copies of buffers {owner} and {bid} share more "
                            f"than one step (from step {first})")
        if last > reach:
            reach, owner = last, bid


def _supply(inst, copies):
    remaining = np.asarray(inst.supply, np.float64).copy()
    for first, last, demand, bid in sorted(copies, key=lambda c: (c[1], -c[0])):
        cum = np.cumsum(remaining[first:last + 1])
        if cum[-1] < demand - TOLERANCE * max(1.0, demand):
            raise Violation("supply", f"buffer {bid}: demand {demand:.6g} exceeds the supply "
                            f"left in steps [{first}, {last}]")
        k = min(int(np.searchsorted(cum, demand)), len(cum) - 1)
        remaining[first:first + k] = 0.0
        remaining[first + k] = max(cum[k] - demand, 0.0)


def placed_reward(inst: Instance, placed: set[int]) -> float:
    """The reward of placing exactly the buffers with ids in ``placed`` in fast memory.

    Without latency tables it is the sum of their benefits; for an instruction
    with a table it is ``L({}) - L(S)`` over its placed buffers ``S`` (the sum
    of the game's per-step benefits ``L(B') - L(B' + b)`` telescopes to this).
    """
    in_table = {bid for table in inst.latencies for bid in table.buffers}
    total = sum(b.benefit for b in inst.buffers if b.id in placed and b.id not in in_table)
    for table in inst.latencies:
        mask = sum(1 << bit for bit, bid in enumerate(table.buffers) if bid in placed)
        total += table.latency[0] - table.latency[mask]
    return total


def _reward(inst, decision, claimed):
    total = placed_reward(inst, {bid for bid, d in decision.items() if d.action != "drop"})
    if abs(total - claimed) > TOLERANCE * max(1.0, abs(total)):
        raise Violation("reward", f"claimed reward {claimed:.9g} but the placed buffers are "
                        f"worth {total:.9g}")
