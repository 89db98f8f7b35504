"""Memory accounting: the bytes the tensor stores hold, over a run (TEMPO Fig. 23a).

Every store reports what it allocates and frees to one :class:`Ledger`:
a point store each tensor it keeps (a view of another tensor's memory, such
as a slice of a block store's buffer, counts nothing: its owner counts it;
a tensor several point stores hold counts once, :meth:`Ledger.hold`),
a block or window store each buffer; a loop run as one device program
(:mod:`tempo.runtime.device_loops`) each launch's carry, inputs and returned
rows, from the launch until the rows are written back. The ledger keeps the bytes live per
tier (``"device"``; ``"host"`` for what a swap plan moved out) and per
store, the peak and which stores held it (taken again whenever the peak grows by
0.5%), and a timeline: the live bytes whenever they moved by 0.5% of the
peak, at most :data:`TIMELINE_SAMPLES` of them (a long run's is halved as it goes, keeping
the higher sample of each pair, and each halving doubles the move that takes a sample, so a
long run samples about as finely as its timeline keeps). ``program.memory_report()`` prints it after a run and
``program.plot_memory(path)`` draws the timeline.

With a device budget (``memory={"device_budget": "2GB"}``), the schedule
holds evict and load statements (:mod:`tempo.plan.swap`) for large
tensors that a later statement reads in slices (observations and
activations an RL learner reads after acting); the stores run them and
report the bytes each moves between the tiers (``evicted``, ``loaded``).
The device tier is held to the budget: going over it raises
:class:`BudgetExceeded` with the tensors held. On the NumPy backend both
tiers are host memory, so the plan is enforced by this accounting alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

TIERS = ("device", "host")
RESOLUTION = 0.005  # a timeline sample when live bytes moved by this share of the peak; the holders within it
TIMELINE_SAMPLES = 1 << 14  # the most samples a timeline keeps; past it, each pair of samples keeps its larger
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


class BudgetExceeded(Exception):
    """The device tier went over its budget; carries the bytes held then, by store."""

    def __init__(self, budget: int, live: int, holders: dict[str, int]):
        super().__init__(f"{live} bytes over a budget of {budget}")
        self.budget, self.live, self.holders = budget, live, holders


def parse_bytes(text) -> int | None:
    """``"512MB"``, ``"8GB"``, ``"1.5GiB"`` or a positive int of bytes; None when it is neither."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text if text > 0 else None
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]I?B|B)?\s*", str(text).upper())
    if not found:
        return None
    value = int(float(found.group(1)) * UNITS[found.group(2) or "B"])
    return value if value > 0 else None


def owned_nbytes(backend, tensor) -> int:
    """Bytes ``tensor`` owns: 0 for a view of another tensor's memory."""
    if type(tensor) is np.ndarray:  # the common case, without a call through the backend
        return 0 if tensor.base is not None else tensor.nbytes
    return backend.owned_nbytes(tensor)


@dataclass
class Ledger:
    """Bytes live per tier and per store; the peak and its holders; a timeline."""

    live: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    by_store: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    peak_holders: dict[str, int] = field(default_factory=dict)  # device tier, at its peak
    timeline: list[tuple[int, int, int]] = field(default_factory=list)  # (launch, device bytes, host bytes)
    launches: int = 0
    budget: int | None = None  # device tier
    evicted: int = 0  # bytes copied from the device to the host tier
    loaded: int = 0  # bytes copied from the host tier to the device
    _held: dict = field(default_factory=dict)  # id(tensor) -> [point stores holding it, bytes, tensor, first store]
    _snapshot_above: int = 0  # the device peak that takes a new snapshot of the holders
    _band: tuple[int, int] = (0, 0)  # total live bytes outside this band take a timeline sample
    _coarser: int = 1  # the band's width in RESOLUTIONs of the peak: doubled by each halving of the timeline
    _rise: int = 0  # device bytes above which a move reaches the peak, the budget or the band's top
    _fall: int = 0  # device bytes below which a move leaves the band at its bottom

    def add(self, store: str, nbytes: int, tier: str = "device") -> None:
        """Record ``nbytes`` (negative: freed) allocated by ``store`` in ``tier``."""
        if not nbytes:
            return
        self.live[tier] += nbytes
        if tier == "device":
            self.by_store[store] = self.by_store.get(store, 0) + nbytes
        self._moved(tier, nbytes)

    def hold(self, store: str, tensor, nbytes: int) -> None:
        """Point store ``store`` takes ``tensor`` (``nbytes`` of device memory): counted for its
        first holder only, so a tensor several stores hold counts once (a merge hands on its
        branch's value; a state is the update that made it)."""
        held = self._held
        entry = held.get(id(tensor))
        if entry is not None:
            entry[0] += 1
            return
        held[id(tensor)] = [1, nbytes, tensor, store]
        live = self.live["device"] + nbytes  # add(store, nbytes), its checks in one comparison
        self.live["device"] = live
        by_store = self.by_store
        by_store[store] = by_store.get(store, 0) + nbytes
        if live > self._rise or live < self._fall:
            self._moved("device", nbytes)

    def drop(self, tensor) -> None:
        """A point store lets go of ``tensor``: its bytes are freed with its last holder."""
        held = self._held
        entry = held.get(id(tensor))
        if entry is None or entry[2] is not tensor:
            return
        entry[0] -= 1
        if entry[0]:
            return
        del held[id(tensor)]
        store, nbytes = entry[3], entry[1]
        live = self.live["device"] - nbytes  # add(store, -nbytes), its checks in one comparison
        self.live["device"] = live
        by_store = self.by_store
        by_store[store] -= nbytes
        if live < self._fall:
            self._moved("device", -nbytes)

    def drop_each(self, tensors) -> None:
        """:meth:`drop` of each of ``tensors``, in order, in one call (the points a store frees at once)."""
        held, by_store, live_bytes = self._held, self.by_store, self.live
        for tensor in tensors:
            entry = held.get(id(tensor))
            if entry is None or entry[2] is not tensor:
                continue
            entry[0] -= 1
            if entry[0]:
                continue
            del held[id(tensor)]
            nbytes = entry[1]
            live = live_bytes["device"] - nbytes
            live_bytes["device"] = live
            by_store[entry[3]] -= nbytes
            if live < self._fall:
                self._moved("device", -nbytes)

    def _moved(self, tier: str, nbytes: int) -> None:
        """``nbytes`` just moved in ``tier``: hold the budget, raise the peak (and take its holders), take a
        timeline sample where the live bytes left the band; then the device bytes that call again."""
        live = self.live[tier]
        if tier == "device" and self.budget is not None and nbytes > 0 and live > self.budget:
            raise BudgetExceeded(self.budget, live, {k: v for k, v in self.by_store.items() if v > 0})
        if live > self.peak[tier]:
            self.peak[tier] = live
            if tier == "device" and live >= self._snapshot_above:
                self.peak_holders = {k: v for k, v in self.by_store.items() if v > 0}
                self._snapshot_above = int(live * (1 + RESOLUTION)) + 1
                self._sample()
        low, high = self._band
        total = self.live["device"] + self.live["host"]
        if total < low or total > high:
            self._sample()
        host = self.live["host"]
        self._rise = min(self.peak["device"], self._band[1] - host)
        self._fall = self._band[0] - host

    def _sample(self) -> None:
        total = self.live["device"] + self.live["host"]
        self.timeline.append((self.launches, self.live["device"], self.live["host"]))
        if len(self.timeline) > TIMELINE_SAMPLES:  # a long run's timeline stays bounded, its highs kept
            self.timeline = halved(self.timeline)
            self._coarser *= 2
        step = int(RESOLUTION * self._coarser * max(self.peak["device"], 1 << 20))
        self._band = (total - step, total + step)

    def report(self, top: int = 8) -> str:
        """The peak per tier and the stores holding the most at the device tier's peak."""
        lines = [f"peak device bytes: {_fmt(self.peak['device'])} (host: {_fmt(self.peak['host'])}), "
                 f"over {self.launches} kernel launches; live at the end: {_fmt(self.live['device'])}"]
        if self.evicted or self.loaded:
            lines.append(f"swapped: {_fmt(self.evicted)} evicted to the host, {_fmt(self.loaded)} loaded back")
        holders = sorted(self.peak_holders.items(), key=lambda kv: -kv[1])
        if holders:
            lines.append(f"held at the peak by ({len(holders)} tensors, the largest {min(top, len(holders))}):")
            lines += [f"  {_fmt(nbytes):>10}  {name}" for name, nbytes in holders[:top]]
        return "\n".join(lines)

    def plot(self, path: str, title: str = "memory over the run") -> None:
        """A PNG of the live bytes per tier against kernel launches."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        samples = self.timeline + [(self.launches, self.live["device"], self.live["host"])]
        xs = [s[0] for s in samples]
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.step(xs, [s[1] / 2**20 for s in samples], where="post", label="device")
        if any(s[2] for s in samples):
            ax.step(xs, [s[2] / 2**20 for s in samples], where="post", label="host")
        ax.set_xlabel("kernel launches")
        ax.set_ylabel("MiB live in tensor stores")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)


def halved(timeline: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Half of ``timeline``'s samples: of each pair in turn, the one with more bytes live (the
    curve's upper envelope: a run that allocates and frees every iteration keeps its highs);
    an odd last sample stays."""
    pairs = zip(timeline[0::2], timeline[1::2])
    kept = [a if a[1] + a[2] >= b[1] + b[2] else b for a, b in pairs]
    return kept + timeline[len(kept) * 2:]


def _fmt(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return str(nbytes)
