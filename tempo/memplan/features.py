"""The observation of a game state: the features of MMap-MuZero §4.3.1.

- ``buffers``: Table 1 features of the current buffer, the next ``K`` buffers
  and the next ``L`` buffers of the same tensor (rows of zeros where absent);
- ``memory_map``: a ``128 x 128`` binary picture of fast memory (offsets x a
  window of ``MAP_WINDOW`` steps centred on the current target time);
- ``memory_profile``: occupancy at the target time, in ``PROFILE_BINS`` equal
  offset ranges (the paper's full resolution would be one entry per byte);
- ``supply``: remaining copy supply in a window centred on the target time;
- ``actions``: for Copy / NoCopy / Drop: legal, interval start and end
  (relative to the target time), offset, and the price of the fast memory it
  holds (bytes x steps at :func:`memory_price`, in benefit units, ``log1p``);
- ``globals``: move number, buffer index, position in its alias group and
  buffers left in it.
"""
from __future__ import annotations

import numpy as np

from tempo.memplan.game import GameState, held

K_NEXT, L_SAME = 5, 3
BUFFER_ROWS = 1 + K_NEXT + L_SAME
BUFFER_FEATURES = 10
MAP_SIZE, MAP_WINDOW = 128, 512
PROFILE_BINS = 256
SUPPLY_WINDOW = 64
ACTION_FEATURES = 5
GLOBAL_FEATURES = 4

SHAPES = {
    "buffers": (BUFFER_ROWS, BUFFER_FEATURES),
    "memory_map": (MAP_SIZE, MAP_SIZE),
    "memory_profile": (PROFILE_BINS,),
    "supply": (SUPPLY_WINDOW,),
    "actions": (3, ACTION_FEATURES),
    "globals": (GLOBAL_FEATURES,),
}


def benefit_scale(inst) -> float:
    """The mean positive benefit: the unit of benefits in the features and of the agents' rewards."""
    positive = [b.benefit for b in inst.buffers if b.benefit > 0]
    return float(np.mean(positive)) if positive else 1.0


def memory_price(inst) -> float:
    """The price of fast memory, benefit per byte x step: the dual price of the fractional knapsack.

    Buffers are taken by benefit per byte-step of their live range until their live ranges fill
    ``capacity x num_steps``; the price is the benefit density of the buffer that overflows it
    (0 when every buffer fits). An instance statistic, known before any game is played.
    """
    area = np.array([held(b.size, b.live_range) for b in inst.buffers], float)
    density = np.array([b.benefit for b in inst.buffers]) / np.maximum(area, 1.0)
    order = np.argsort(-density, kind="stable")
    full = np.searchsorted(np.cumsum(area[order]), float(inst.capacity) * inst.num_steps, side="right")
    return float(density[order[full]]) if full < len(order) else 0.0


class Observer:
    """Builds observations for games on one instance (static tables computed once)."""

    def __init__(self, game: GameState):
        inst = game.inst
        self.steps = inst.num_steps
        self.capacity = inst.capacity
        self.mean_supply = max(float(np.mean(inst.supply)), 1e-12)
        self.benefit_scale = benefit_scale(inst)
        self.price = memory_price(inst) / self.benefit_scale
        n = len(inst.buffers)
        self.next_same = np.full(n, -1)
        last: dict[int, int] = {}
        for i in range(n - 1, -1, -1):
            self.next_same[i] = last.get(inst.buffers[i].tensor_id, -1)
            last[inst.buffers[i].tensor_id] = i
        self.alias_pos = np.zeros(n)
        self.alias_left = np.zeros(n)
        seen: dict[int, int] = {}
        for i, b in enumerate(inst.buffers):
            if b.alias_id is not None:
                self.alias_pos[i] = seen.get(b.alias_id, 0)
                seen[b.alias_id] = seen.get(b.alias_id, 0) + 1
        for i, b in enumerate(inst.buffers):
            if b.alias_id is not None:
                self.alias_left[i] = seen[b.alias_id] - 1 - self.alias_pos[i]

    def _buffer_row(self, game: GameState, i: int, now: int) -> np.ndarray:
        b = game.buffers[i]
        cur = game.buffers[game.index]
        return np.array([
            1.0, b.size / self.capacity, float(b.is_output), (b.target_time - now) / self.steps,
            float(b.tensor_id == cur.tensor_id),
            float(b.alias_id is not None and b.alias_id == cur.alias_id),
            (b.live_range[0] - now) / self.steps, (b.live_range[1] - now) / self.steps,
            b.demand / self.mean_supply, b.benefit / self.benefit_scale], np.float32)

    def buffer_rows(self, game: GameState) -> np.ndarray:
        """The buffer features (current, next K, next L of the same tensor)."""
        out = np.zeros(SHAPES["buffers"], np.float32)
        n, i = len(game.buffers), game.index
        now = game.buffers[i].target_time
        rows = [i] + list(range(i + 1, min(i + 1 + K_NEXT, n)))
        j = self.next_same[i]
        same = []
        while j >= 0 and len(same) < L_SAME:
            same.append(j)
            j = self.next_same[j]
        for r, k in enumerate(rows):
            out[r] = self._buffer_row(game, k, now)
        for r, k in enumerate(same):
            out[1 + K_NEXT + r] = self._buffer_row(game, k, now)
        return out

    def action_rows(self, game: GameState) -> np.ndarray:
        """Legal, interval start/end relative to the target time, offset, priced memory; per action."""
        out = np.zeros(SHAPES["actions"], np.float32)
        now = game.current.target_time
        for a, p in enumerate(game.options()):
            if p is None:
                continue
            out[a, 0] = 1.0
            if p.interval is not None:
                out[a, 1:3] = [(p.interval[0] - now) / self.steps, (p.interval[1] - now) / self.steps]
                out[a, 4] = np.log1p(self.price * held(game.current.size, p.interval))
            if p.offset is not None:
                out[a, 3] = p.offset / self.capacity
        return out

    def __call__(self, game: GameState) -> dict[str, np.ndarray]:
        """The observation of ``game`` (which must not be over)."""
        now = game.current.target_time
        lo = max(0, min(now - MAP_WINDOW // 2, self.steps - MAP_WINDOW))
        hi = min(self.steps, lo + MAP_WINDOW) - 1
        s0 = now - SUPPLY_WINDOW // 2
        supply = np.zeros(SUPPLY_WINDOW, np.float32)
        a, b = max(0, s0), min(self.steps, s0 + SUPPLY_WINDOW)
        supply[a - s0:b - s0] = game.ledger.remaining[a:b] / self.mean_supply
        n = len(game.buffers)
        i = game.index
        return {
            "buffers": self.buffer_rows(game),
            "memory_map": game.memory.image(lo, hi, MAP_SIZE, MAP_SIZE),
            "memory_profile": game.memory.profile(now, PROFILE_BINS),
            "supply": supply,
            "actions": self.action_rows(game),
            "globals": np.array([len(game.history) / n, i / n, self.alias_pos[i] / n,
                                 self.alias_left[i] / n], np.float32),
        }
