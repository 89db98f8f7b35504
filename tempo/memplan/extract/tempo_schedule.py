"""Game instances from Tempo's own schedules (MMap-MuZero meets Tempo).

The instance of a compiled Tempo program, for its run's bounds and a device
budget, asks which of the tensors the default swap plan moves to the host
(:func:`tempo.plan.swap.candidates`) may stay on the device instead:

- **logical time** is the schedule's order: one step per execute statement of
  the AST, in program order (a loop's body counts once: every run of a
  statement shares its step);
- **fast memory** is the device: its capacity is the budget less the most
  bytes the other tensors hold at once, each counted from its first
  writer's step to the step that frees it, at what one iteration of the
  main loop holds of it: its last reader where a free statement in the
  producer's own loop body releases each point after its readers (one point
  held; a free in a later loop finds every point of the producer's loop
  live), else the end of its
  iteration of the main loop, or of the program outside that loop (a value
  the next iteration reads is also held from that iteration's start); a
  layout op's output (reshape, permute, expand) in a point store is a view
  and holds nothing;
- **buffers**: for each candidate, an output buffer at its first writer's step,
  as large as what one iteration holds of it and live until it is freed;
  and an operand buffer at each statement that reads it, as large as one
  launch's read;
- **benefit** is the copy time a buffer on the device saves, from the cost
  model's copy bandwidth: an output's evicts, an operand's loads over one
  iteration; a buffer's **demand** is its own copy time;
- **supply** is zero at every step: the executor copies synchronously, so no
  copy overlaps computation, and each candidate either stays on the device
  for its whole life (NoCopy, and its operands reuse it) or swaps (Drop).

:func:`resident` solves the instance with one of ``tempo.memplan``'s agents
and returns the candidates whose output buffer the solution keeps on the
device: the ``"memplan"`` swap plan swaps the others.
"""
from __future__ import annotations

import math
import runpy
import sys
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tempo.errors import BoundError
from tempo.ir import ops
from tempo.ir.sdg import SDG
from tempo.api.compile import FirstCompile, stop_at_first_compile
from tempo.memplan.agents import get_agent
from tempo.memplan.problem import Buffer, Instance, MemplanError
from tempo.memplan.validate import validate
from tempo.plan import ExecutionPlan, build, swap
from tempo.schedule import ast
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import bound_of
from tempo.symbolic.simplify import simplify


LAYOUT = (ops.ExpandOp, ops.ReshapeOp, ops.UnsqueezeOp, ops.SqueezeOp, ops.PermuteOp)  # views of their input


@dataclass(frozen=True)
class TierModel:
    """Bytes per second of a copy between the device and the host tier (PCIe 4 x16 by default)."""

    copy_bandwidth: float = 25e9

    def seconds(self, nbytes: float) -> float:
        """Microseconds to copy ``nbytes`` between the tiers."""
        return 1e6 * nbytes / self.copy_bandwidth


@dataclass(frozen=True)
class Extracted:
    """An instance and, per candidate tensor ``(node, output)``, the id of its output buffer."""

    instance: Instance
    outputs: dict[tuple[int, int], int]


def instance(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int], budget: int,
             candidates: set[tuple[int, int]], model: TierModel = TierModel(), name: str = "tempo",
             plan: ExecutionPlan | None = None) -> Extracted:
    """The game instance of ``program`` for ``bounds`` and a device ``budget`` in bytes (see the
    module docstring); ``candidates``: the tensors the game decides; ``plan``: the program's
    execution plan (None: made here)."""
    steps = _steps(program)
    starts, ends = _iterations(program, len(steps))
    plan = plan if plan is not None else build(sdg, program, keep)
    buffered = {key for key, c in plan.choices.items() if c.kind != "point"}  # own rows
    runs: dict[int, list[int]] = defaultdict(list)
    for k, (stmt, _) in enumerate(steps):
        runs[stmt.node_id].append(k)
    loop_of = _innermost_loops(program)
    freed = {(s.node_id, j) for s in ast.leaves(program)  # point by point (a tile's rows: held whole)
             if isinstance(s, ast.Free) and not any(p.op == "slice" for p in s.point)
             and loop_of.get(id(s)) is loop_of.get(("run", s.node_id))  # in the loop body that makes them
             for j in s.freed(len(sdg.nodes[s.node_id].shapes))}
    reads: dict[tuple[int, int], list] = defaultdict(list)
    for e in sdg.edges:
        if e.sink_in >= 0 and e.sink in runs:
            reads[(e.src, e.src_out)].extend((k, e) for k in runs[e.sink])
    pinned = np.zeros(len(steps) + 1, np.int64)
    rows = []
    for n, node in sdg.nodes.items():
        if n not in runs:
            continue
        for j in range(len(node.shapes)):
            key = (n, j)
            owns = key in buffered or _owns(node, j)
            held = _row_bytes(node, j, bounds) * (1 if key in freed else _points(node, bounds)) * owns
            first = runs[n][0]
            users = [k for k, _ in reads[key]]
            spans = _held(first, users + runs[n], key in freed, starts, ends)
            if n in keep:
                spans = [(0, len(steps) - 1)]
            if key in candidates:  # one buffer: from its first step held to its last
                rows.append((key, min(a for a, _ in spans), max(b for _, b in spans), held))
                continue
            for a, b in spans:
                pinned[a] += held
                pinned[b + 1] -= held
    capacity = max(int(budget - np.cumsum(pinned).max()), 1)
    buffers, outputs = [], {}
    entries = []
    for key, first, last, held in rows:
        entries.append((first, 0, key, True, (first, last), held, model.seconds(held)))
        for k, e in reads[key]:
            stmt, trips = steps[k]
            nbytes = _read_bytes(sdg, e, stmt, bounds)
            if nbytes:
                entries.append((k, 1, key, False, (first, max(k, first)), nbytes, model.seconds(nbytes * trips)))
    entries.sort(key=lambda x: (x[0], x[1]))
    tensors = {key: t for t, key in enumerate(dict.fromkeys(x[2] for x in entries))}
    for time, _, key, is_output, live, size, benefit in entries:
        bid = len(buffers)
        if is_output:
            outputs[key] = bid
        buffers.append(Buffer(bid, max(int(size), 1), is_output, time, tensors[key], None, live,
                              model.seconds(size), benefit))
    return Extracted(Instance(capacity, (0.0,) * max(len(steps), 1), tuple(buffers), name=name,
                              extra={"source": "tempo", "budget": budget, "copy_bandwidth": model.copy_bandwidth,
                                     "tensors": {f"{n}.{j}": bid for (n, j), bid in outputs.items()}}), outputs)


def resident(sdg: SDG, program: ast.Stmt, keep: set[int], bounds: dict[str, int], budget: int,
             candidates: set[tuple[int, int]], agent: str = "heuristic", seconds: float = 1.0,
             seed: int = 0) -> set[tuple[int, int]]:
    """The ``candidates`` that ``agent``'s solution of the instance keeps on the device."""
    extracted = instance(sdg, program, keep, bounds, budget, candidates)
    if not extracted.outputs:
        return set()
    solution = get_agent(agent)(extracted.instance, seconds, seed).solution
    validate(extracted.instance, solution)
    kept = {d.buffer for d in solution.decisions if d.action == "nocopy"}
    return {key for key, bid in extracted.outputs.items() if bid in kept}


def _innermost_loops(program: ast.Stmt) -> dict:
    """The innermost loop around each Free statement (by ``id``) and each node's first Execute
    (by ``("run", node)``); None outside every loop."""
    out: dict = {}

    def walk(stmt, loop):
        if isinstance(stmt, ast.Sequence):
            for s in stmt.body:
                walk(s, loop)
        elif isinstance(stmt, ast.Loop):
            walk(stmt.body, stmt)
        elif isinstance(stmt, ast.If):
            walk(stmt.then, loop)
            if stmt.orelse is not None:
                walk(stmt.orelse, loop)
        elif isinstance(stmt, ast.Free):
            out[id(stmt)] = loop
        elif isinstance(stmt, ast.Execute):
            out.setdefault(("run", stmt.node_id), loop)

    walk(program, None)
    return out


def _steps(program: ast.Stmt) -> list[tuple[ast.Execute, int]]:
    """Each execute statement in program order, with how many times one iteration of the
    outermost loop runs it (its inner loops' trip counts at their first counters)."""
    out = []

    def walk(stmt, trips: int, depth: int, env: dict):
        if isinstance(stmt, ast.Sequence):
            for s in stmt.body:
                walk(s, trips, depth, env)
        elif isinstance(stmt, ast.Loop):
            inner = dict(env, **{stmt.var: _value(stmt.start, env)})
            count = trips if depth == 0 else trips * max(_trips(stmt, env), 1)
            walk(stmt.body, count, depth + 1, inner)
        elif isinstance(stmt, ast.If):
            walk(stmt.then, trips, depth, env)
            if stmt.orelse is not None:
                walk(stmt.orelse, trips, depth, env)
        elif isinstance(stmt, ast.Execute):
            out.append((stmt, trips))

    walk(program, 1, 0, {})
    return out


def _iterations(program: ast.Stmt, count: int) -> tuple[list[int], list[int]]:
    """For each step, the first and the last step of its iteration of the main loop (the top-level
    loop running the most statements, after whose iterations the executor frees what no later
    one reads); outside that loop, the first and the last step of all."""
    top = program.body if isinstance(program, ast.Sequence) else (program,)
    sizes = [sum(1 for _ in ast.statements(s)) for s in top]
    loops = [k for k, s in enumerate(top) if isinstance(s, ast.Loop)]
    main = max(loops, key=lambda k: sizes[k]) if loops else None
    starts, ends, start = [], [], 0
    for k, size in enumerate(sizes):
        starts += [start if k == main else 0] * size
        ends += [start + size - 1 if k == main else count - 1] * size
        start += size
    return starts, ends


def _held(first: int, uses: list[int], freed: bool, starts: list[int], ends: list[int]) -> list[tuple[int, int]]:
    """The steps over which a tensor first written at step ``first`` and used at ``uses`` is held:
    to its last use when a free statement releases it (``freed``), else to the end of its
    iteration; a use before ``first`` reads the previous iteration's value, held from the start of
    the iteration to that use (or to the iteration's end)."""
    after = [k for k in uses if k >= first]
    before = [k for k in uses if k < first]
    if before:
        wrap = max(before) if freed else ends[max(before)]
        return [(first, ends[first]), (starts[first], wrap)]
    return [(first, max(after) if freed else max(ends[k] for k in after))]


def _value(e, env: dict) -> int:
    try:
        return int(compile_expr(e)(env))
    except (BoundError, KeyError, TypeError, ZeroDivisionError):  # a symbol not given: counted as 0
        return 0


def _trips(loop: ast.Loop, env: dict) -> int:
    cond = loop.cond
    if cond.op not in ("lt", "le") or not cond.args[0].is_symbol:
        return 1
    stop = cond.args[1] if cond.op == "lt" else simplify(cond.args[1] + 1)
    return (_value(stop, env) - _value(loop.start, env)) // max(loop.step, 1)


def _row_bytes(node, j: int, bounds: dict) -> int:
    shape = [s if isinstance(s, int) else _value(s, bounds) for s in node.shapes[j]]
    return math.prod(shape) * np.dtype(node.dtypes[j]).itemsize


def _owns(node, j: int) -> bool:
    """Whether output ``j`` of ``node`` holds memory of its own: not a layout op's view of its input
    (which the ledger does not count either)."""
    op = node.op
    if isinstance(op, ops.FusedOp):
        op = op.steps[op.outputs[j][0]].op
    return not isinstance(op, LAYOUT)


def _points(node, bounds: dict) -> int:
    """Points of ``node`` one iteration holds: those of its inner dims (of its one dim when it has one)."""
    dims = node.domain[1:] if len(node.domain) > 1 else node.domain
    return math.prod(bounds.get(bound_of(d).name, 1) for d in dims) or 1


def _read_bytes(sdg: SDG, e, stmt: ast.Execute, bounds: dict) -> int:
    """Bytes one launch of ``stmt`` reads through edge ``e`` (slices at the loop's first counters)."""
    at = dict(zip(sdg.nodes[e.sink].domain, stmt.point))
    env = dict(bounds, **{s.name: 0 for p in stmt.point for s in p.free_symbols() if s.name not in bounds})
    count = 1
    for item in e.index.args:
        if item.op == "slice":
            count *= max(_value(simplify(item.args[1] - item.args[0]).substitute(at), env), 0)
    return count * _row_bytes(sdg.nodes[e.src], e.src_out, bounds)


def capture(path: str, argv: list[str], budget: int | None = None):
    """Run the Tempo script at ``path`` (with ``argv``) up to its first compiled program and return
    ``(program, bounds)`` without running it; ``budget``: compile it under this device budget."""
    saved_argv = sys.argv
    sys.argv = [path, *argv]
    try:
        with stop_at_first_compile(None if budget is None else {"device_budget": budget}):
            runpy.run_path(path, run_name="__main__")
    except FirstCompile as found:
        return found.program, found.bounds
    except FileNotFoundError:
        raise MemplanError(f"{path}: no such file") from None
    finally:
        sys.argv = saved_argv
    raise MemplanError(f"{path} ran without compiling a Tempo program (ctx.run or ctx.compile)")


def program_instance(program, bounds: dict[str, int] | None, budget: int | None = None) -> Extracted:
    """The instance of a compiled :class:`tempo.api.compile.Program` for the run's ``bounds`` and
    ``budget`` (None: the one it was compiled with)."""
    budget = budget or program.memory.get("device_budget")
    if budget is None or not bounds:
        raise MemplanError("a Tempo instance needs the run's bounds and a device budget (--budget)")
    keep, bounds = {n for n, _ in program.fetch}, swap.with_tiles(program.sdg, bounds)
    plan = program.plan
    found = swap.candidates(program.sdg, program.ast, keep, bounds, plan.choices)
    return instance(program.sdg, program.ast, keep, bounds, budget, found, name="tempo", plan=plan)
