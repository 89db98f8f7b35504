"""Game instances from real programs: XLA's buffers of JAX-compiled trainers.

Logical time is XLA's schedule order of the entry computation. Each scheduled
instruction contributes one *operand* buffer per array it reads (live from the
array's definition to this use) and one *output* buffer for the array it
writes (live from here to the array's last use). Arrays are tensors
(``tensor_id``). When XLA's buffer assignment lets an instruction write its
result in place of an operand that dies there (same allocation and offset),
that operand use and the result form an alias group. Benefits, supply,
demands and latency tables come from :mod:`.costmodel`.
"""
from __future__ import annotations

import numpy as np

from tempo.memplan.extract.costmodel import TABLE_BUFFERS, CostModel
from tempo.memplan.extract.programs import PROGRAMS
from tempo.memplan.extract.xla_dump import Trace, compile_and_trace
from tempo.memplan.problem import Buffer, Instance, LatencyTable

NOT_COMPUTE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
MIN_BYTES = 1024

__all__ = ["PROGRAMS", "CostModel", "extract_instance", "instance_from_trace"]


def _resolve(name: str, trace: Trace, by_name) -> str | None:
    """The array value behind ``name`` (looking through bitcasts), or None."""
    while name not in trace.live or name not in trace.size:
        inst = by_name.get(name)
        if inst is None or inst.opcode != "bitcast" or not inst.operands:
            return None
        name = inst.operands[0]
    return name


def _peak_bytes(trace: Trace, steps: int) -> int:
    delta = np.zeros(steps + 2, np.int64)
    for name, (start, end) in trace.live.items():
        if trace.size.get(name, 0) >= MIN_BYTES:
            delta[start] += trace.size[name]
            delta[min(end, steps) + 1] -= trace.size[name]
    return int(np.cumsum(delta).max())


def instance_from_trace(trace: Trace, capacity_fraction: float = 0.25,
                        model: CostModel = CostModel()) -> Instance:
    """Build the game instance of a compiled program under ``model``."""
    by_name = {i.name: i for i in trace.sequence}
    elements = {i.name: i.elements for i in trace.sequence}
    steps = len(trace.sequence)
    buffers: list[Buffer] = []
    supply, tables, hbm = [], [], 0.0
    tensor_ids: dict[str, int] = {}
    next_alias = 0
    for t, inst in enumerate(trace.sequence):
        if inst.opcode in NOT_COMPUTE:
            supply.append(1e6 * model.overhead)
            hbm += 1e6 * model.overhead
            continue
        reads = []
        for op in inst.operands:
            v = _resolve(op, trace, by_name)
            if v is not None and v not in reads and trace.size[v] >= MIN_BYTES:
                reads.append(v)
        out = inst.name if (inst.name in trace.live and
                            trace.size.get(inst.name, 0) >= MIN_BYTES) else None
        rows = [(v, False, (min(trace.live[v][0], t), t)) for v in reads]
        if out is not None:
            rows.append((out, True, (t, min(max(trace.live[out][1], t), steps - 1))))
        in_place = next((v for v in reads if out is not None and trace.live[v][1] == t
                         and trace.allocation.get(v) == trace.allocation.get(out)), None)
        alias = None
        if in_place is not None:
            alias, next_alias = next_alias, next_alias + 1
        flops = model.flops(inst, elements)
        sizes = [trace.size[v] for v, _, _ in rows]
        none = model.latency(flops, [], sizes)
        supply.append(model.latency(flops, sizes, []))
        hbm += none
        first = len(buffers)
        for k, (v, is_output, live) in enumerate(rows):
            single = model.latency(flops, [sizes[k]], sizes[:k] + sizes[k + 1:])
            group = alias if v == in_place or (is_output and alias is not None) else None
            buffers.append(Buffer(len(buffers), sizes[k], is_output, t,
                                  tensor_ids.setdefault(v, len(tensor_ids)), group, live,
                                  model.demand(sizes[k]), none - single))
        if len(rows) > 1:
            top = sorted(range(len(rows)), key=lambda k: -sizes[k])[:TABLE_BUFFERS]
            rest = [sizes[k] for k in range(len(rows)) if k not in top]
            table = model.table(flops, [sizes[k] for k in top], rest)
            tables.append(LatencyTable(t, tuple(first + k for k in top), tuple(table)))
    capacity = max(int(_peak_bytes(trace, steps) * capacity_fraction), 1)
    return Instance(capacity, tuple(supply), tuple(buffers), hbm, tuple(tables), trace.name,
                    {"source": "xla", "cost_model": model.__dict__})


def extract_instance(program: str, scale: int, capacity_fraction: float = 0.25,
                     model: CostModel = CostModel()) -> Instance:
    """Compile ``PROGRAMS[program](scale)`` with XLA and build its instance."""
    fn, args = PROGRAMS[program](scale)
    trace = compile_and_trace(fn, args, f"{program}{scale}")
    return instance_from_trace(trace, capacity_fraction, model)
