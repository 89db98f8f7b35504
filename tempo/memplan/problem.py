"""Problem instances and solutions of the memory-mapping game, and their JSON form.

An instance is a program seen as a chronological sequence of buffers (the
operands and outputs of its instructions), a fast-memory ``capacity`` and a
copy ``supply`` per logical time step (MMap-MuZero §4.1, Appendix A). Extra
JSON keys are allowed; two are understood:

- ``hbm_latency``: the modelled latency of the program with every buffer in
  slow memory (the latency model is ``hbm_latency - reward``);
- ``latencies``: per-instruction latency tables, ``[{"time": t, "buffers":
  [ids], "latency": [L(S) for every subset S as a bitmask over buffers]}]``,
  from which the game updates benefits (Appendix A).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tempo.errors import TempoError
from tempo.files import write_bytes_atomic

ACTIONS = ("copy", "nocopy", "drop")


class MemplanError(TempoError):
    """A bad memory-mapping instance, solution or argument."""


@dataclass(frozen=True)
class Buffer:
    """One operand or output of one instruction (Table 1 of the paper)."""

    id: int
    size: int
    is_output: bool
    target_time: int
    tensor_id: int
    alias_id: int | None
    live_range: tuple[int, int]
    demand: float
    benefit: float


@dataclass(frozen=True)
class LatencyTable:
    """Latency of the instruction at ``time`` for every subset of ``buffers`` in fast memory.

    ``latency[mask]`` is the latency when exactly the buffers whose bits are set
    in ``mask`` (bit i for ``buffers[i]``) are in fast memory.
    """

    time: int
    buffers: tuple[int, ...]
    latency: tuple[float, ...]


@dataclass(frozen=True)
class Instance:
    """A memory-mapping problem: buffers in chronological order, capacity and copy supply."""

    capacity: int
    supply: tuple[float, ...]
    buffers: tuple[Buffer, ...]
    hbm_latency: float | None = None
    latencies: tuple[LatencyTable, ...] = ()
    name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def num_steps(self) -> int:
        """The number of logical time steps (instructions)."""
        return len(self.supply)


@dataclass(frozen=True)
class Decision:
    """What a solution does with one buffer: its action, offset and allocation interval."""

    buffer: int
    action: str
    offset: int | None
    interval: tuple[int, int] | None


@dataclass(frozen=True)
class Solution:
    """One decision per buffer, in the instance's buffer order, and the claimed reward."""

    decisions: tuple[Decision, ...]
    reward: float


# --------------------------------------------------------------------------- loading

def _need(obj: Mapping, key: str, where: str) -> Any:
    if not isinstance(obj, Mapping):
        raise MemplanError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise MemplanError(f"{where}: missing key '{key}'")
    return obj[key]


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MemplanError(f"{where}: expected an integer, got {value!r}")
    return value


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MemplanError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _pair(value: Any, where: str) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise MemplanError(f"{where}: expected [start, end], got {value!r}")
    start, end = _int(value[0], where), _int(value[1], where)
    if start > end:
        raise MemplanError(f"{where}: start {start} is after end {end}")
    return start, end


def _buffer(obj: Mapping, index: int, num_steps: int) -> Buffer:
    where = f"buffers[{index}]"
    bid = _int(_need(obj, "id", where), f"{where}.id")
    where = f"buffer {bid} (buffers[{index}])"
    is_output = _need(obj, "is_output", where)
    if not isinstance(is_output, bool):
        raise MemplanError(f"{where}.is_output: expected true or false, got {is_output!r}")
    alias = _need(obj, "alias_id", where)
    buf = Buffer(
        id=bid,
        size=_int(_need(obj, "size", where), f"{where}.size"),
        is_output=is_output,
        target_time=_int(_need(obj, "target_time", where), f"{where}.target_time"),
        tensor_id=_int(_need(obj, "tensor_id", where), f"{where}.tensor_id"),
        alias_id=None if alias is None else _int(alias, f"{where}.alias_id"),
        live_range=_pair(_need(obj, "live_range", where), f"{where}.live_range"),
        demand=_num(_need(obj, "demand", where), f"{where}.demand"),
        benefit=_num(_need(obj, "benefit", where), f"{where}.benefit"),
    )
    if buf.size <= 0:
        raise MemplanError(f"{where}.size: must be positive, got {buf.size}")
    if buf.demand < 0:
        raise MemplanError(f"{where}.demand: must be non-negative, got {buf.demand}")
    if not 0 <= buf.target_time < num_steps:
        raise MemplanError(f"{where}.target_time: {buf.target_time} is outside the "
                           f"{num_steps} time steps of 'supply'")
    start, end = buf.live_range
    if not (0 <= start <= buf.target_time <= end < num_steps):
        raise MemplanError(f"{where}.live_range: {list(buf.live_range)} must contain "
                           f"target_time {buf.target_time} and lie within [0, {num_steps - 1}]")
    return buf


def _table(obj: Mapping, index: int, ids: set[int]) -> LatencyTable:
    where = f"latencies[{index}]"
    members = _need(obj, "buffers", where)
    if not isinstance(members, list) or not members:
        raise MemplanError(f"{where}.buffers: expected a non-empty list of buffer ids")
    members = tuple(_int(m, f"{where}.buffers") for m in members)
    for m in members:
        if m not in ids:
            raise MemplanError(f"{where}.buffers: unknown buffer id {m}")
    values = _need(obj, "latency", where)
    if not isinstance(values, list) or len(values) != 2 ** len(members):
        raise MemplanError(f"{where}.latency: expected {2 ** len(members)} values "
                           f"(one per subset of {len(members)} buffers)")
    return LatencyTable(_int(_need(obj, "time", where), f"{where}.time"), members,
                        tuple(_num(v, f"{where}.latency") for v in values))


def instance_from_json(obj: Any, name: str = "") -> Instance:
    """Build an :class:`Instance` from parsed JSON, naming the bad key or buffer on error."""
    where = name or "instance"
    capacity = _int(_need(obj, "capacity", where), f"{where}: capacity")
    if capacity <= 0:
        raise MemplanError(f"{where}: capacity must be positive, got {capacity}")
    supply = _need(obj, "supply", where)
    if not isinstance(supply, list) or not supply:
        raise MemplanError(f"{where}: supply must be a non-empty list of numbers")
    supply = tuple(_num(s, f"{where}: supply[{i}]") for i, s in enumerate(supply))
    if min(supply) < 0:
        raise MemplanError(f"{where}: supply values must be non-negative")
    raw = _need(obj, "buffers", where)
    if not isinstance(raw, list) or not raw:
        raise MemplanError(f"{where}: buffers must be a non-empty list")
    buffers = tuple(_buffer(b, i, len(supply)) for i, b in enumerate(raw))
    ids = [b.id for b in buffers]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise MemplanError(f"{where}: buffer id {dup} appears more than once")
    for prev, cur in zip(buffers, buffers[1:]):
        if cur.target_time < prev.target_time:
            raise MemplanError(f"{where}: buffer {cur.id} (target_time {cur.target_time}) comes "
                               f"after buffer {prev.id} (target_time {prev.target_time}); "
                               "buffers must be in chronological order")
    tables = tuple(_table(t, i, set(ids)) for i, t in enumerate(obj.get("latencies") or []))
    hbm = obj.get("hbm_latency")
    known = {"capacity", "supply", "buffers", "latencies", "hbm_latency", "name"}
    return Instance(capacity, supply, buffers,
                    None if hbm is None else _num(hbm, f"{where}: hbm_latency"), tables,
                    obj.get("name", name) if isinstance(obj.get("name", name), str) else name,
                    {k: v for k, v in obj.items() if k not in known})


def solution_from_json(obj: Any, where: str = "solution") -> Solution:
    """Build a :class:`Solution` from parsed JSON (shape only; the validator checks meaning)."""
    raw = _need(obj, "decisions", where)
    if not isinstance(raw, list):
        raise MemplanError(f"{where}: decisions must be a list")
    decisions = []
    for i, d in enumerate(raw):
        at = f"{where}: decisions[{i}]"
        action = _need(d, "action", at)
        if action not in ACTIONS:
            raise MemplanError(f"{at}.action: expected one of {', '.join(ACTIONS)}, got {action!r}")
        offset, interval = _need(d, "offset", at), _need(d, "interval", at)
        decisions.append(Decision(
            _int(_need(d, "buffer", at), f"{at}.buffer"), action,
            None if offset is None else _int(offset, f"{at}.offset"),
            None if interval is None else _pair(interval, f"{at}.interval")))
    return Solution(tuple(decisions), _num(_need(obj, "reward", where), f"{where}: reward"))


# --------------------------------------------------------------------------- saving

def instance_to_json(inst: Instance) -> dict:
    """The interchange JSON of an instance (extra keys kept)."""
    obj: dict[str, Any] = dict(inst.extra)
    if inst.name:
        obj["name"] = inst.name
    obj.update(capacity=inst.capacity, supply=list(inst.supply), buffers=[
        {"id": b.id, "size": b.size, "is_output": b.is_output, "target_time": b.target_time,
         "tensor_id": b.tensor_id, "alias_id": b.alias_id, "live_range": list(b.live_range),
         "demand": b.demand, "benefit": b.benefit} for b in inst.buffers])
    if inst.hbm_latency is not None:
        obj["hbm_latency"] = inst.hbm_latency
    if inst.latencies:
        obj["latencies"] = [{"time": t.time, "buffers": list(t.buffers),
                             "latency": list(t.latency)} for t in inst.latencies]
    return obj


def solution_to_json(sol: Solution) -> dict:
    """The interchange JSON of a solution."""
    return {"decisions": [{"buffer": d.buffer, "action": d.action, "offset": d.offset,
                           "interval": None if d.interval is None else list(d.interval)}
                          for d in sol.decisions], "reward": sol.reward}


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`tempo.files.write_bytes_atomic`)."""
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
    write_bytes_atomic(path, json.dumps(obj).encode())


def _read(path: str | os.PathLike) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise MemplanError(f"{os.fspath(path)}: no such file") from None
    except json.JSONDecodeError as exc:
        raise MemplanError(f"{os.fspath(path)}: not valid JSON ({exc})") from None


def load_instance(path: str | os.PathLike) -> Instance:
    """Read an instance JSON file."""
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return instance_from_json(_read(path), os.fspath(path) if name == "" else name)


def load_solution(path: str | os.PathLike) -> Solution:
    """Read a solution JSON file."""
    return solution_from_json(_read(path), os.fspath(path))
