"""What the executor frees after each iteration of the main loop.

A typical training program is one loop over the iteration dim ``i`` holding
almost every statement. A tensor computed in that loop whose every reader
is in the loop and reads it along ``i`` at an index that never decreases
as ``i`` grows (``i - c``, ``(i // K) * K``, a slice ``max(0, i - W):i + 1``)
is dead below the lowest index the next iteration reads; its points are
freed after each iteration, so memory stays flat over thousands of
iterations. So is a tensor over the loop's dim computed ahead of the loop,
for every iteration at once, whose readers are in the loop or ahead of it
(these have read it all before the loop starts).

Each eviction is plain data: per output, the lowest index each reader
reads from the next iteration on, as an expression of the loop counter
(:class:`Floor`). The executor's generated code frees below it inline after
each iteration (:mod:`tempo.runtime.codegen`), one ``free_below`` call per
tensor, with no per-iteration evaluation of closures.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tempo.ir.sdg import SDG
from tempo.schedule import ast
from tempo.symbolic.affine import last_true, nondecreasing_in, offset
from tempo.symbolic.expr import Expr, symbol
from tempo.symbolic.simplify import simplify


@dataclass(frozen=True)
class Floor:
    """The lowest index along the evicted axis one reader reads from a loop counter on: ``lowest``,
    an expression of the counter, while the reader's dim (``reader``, also of the counter) is at
    most ``last``; past ``last`` the reader's condition never holds again and it reads nothing
    (``last`` None: no such end)."""

    lowest: Expr
    reader: Expr
    last: int | None = None


@dataclass(frozen=True)
class Eviction:
    """A tensor freed as the main loop goes: ``node``'s points along ``axis`` below the lowest
    index any of its readers reads from the next iteration on. ``floors`` holds, per output, one
    :class:`Floor` per reader (an output nobody reads has none: all of it is freed)."""

    node: int
    axis: int
    floors: dict = field(compare=False, repr=False, default_factory=dict)


def iteration_evictions(sdg: SDG, program: ast.Stmt, keep) -> tuple[ast.Loop | None, tuple[Eviction, ...]]:
    """The outermost loop that runs most of the program, and what to free after each of its
    steps (see the module docstring); ``keep``: nodes whose values must survive (fetched)."""
    top = program.body if isinstance(program, ast.Sequence) else (program,)
    loops = [s for s in top if isinstance(s, ast.Loop)]
    if not loops:
        return None, ()
    loop = max(loops, key=lambda s: sum(1 for _ in ast.statements(s)))
    inside, dim = _in_loop(sdg, loop)
    if inside is None:
        return None, ()
    after = False
    for other in top:
        after = after or other is loop
        if other is not loop:
            for ex in ast.statements(other):  # also run outside the loop: keep, unless at a peeled iteration
                if ex.node_id in inside and not _peeled(ex, loop, after, inside[ex.node_id]):
                    inside.pop(ex.node_id)
    executed = {ex.node_id for ex in ast.statements(program)}  # the others never read anything
    ahead = _ahead(sdg, top, loop, dim, inside)
    evictions = []
    for n, axis in [(n, axis) for n, (axis, _) in inside.items()] + list(ahead.items()):
        if n in keep:
            continue
        floors: dict[int, list] = {j: [] for j in range(len(sdg.nodes[n].shapes))}
        for e in sdg.edges:
            if e.src == n and e.sink in executed and e.sink not in ahead:  # what runs ahead has read all
                floors[e.src_out].append(_read_floor(e, axis, dim, loop.var, inside))
        if all(floor is not None for per_output in floors.values() for floor in per_output):
            evictions.append(Eviction(n, axis, floors))
    return loop, tuple(sorted(evictions, key=lambda e: e.node))


def _ahead(sdg: SDG, top: tuple, loop: ast.Loop, dim: Expr, inside: dict) -> dict[int, int]:
    """node -> the axis of ``dim`` in its domain, for every node over ``dim`` that runs only ahead
    of ``loop``, for every iteration at once (a statement isl placed before the loop over
    iterations): its points are freed as the loop goes too, where its readers in the loop allow."""
    at = next(k for k, s in enumerate(top) if s is loop)
    before = {ex.node_id for s in top[:at] for ex in ast.statements(s)}
    elsewhere = {ex.node_id for s in top[at:] for ex in ast.statements(s)}
    out = {}
    for n in before - elsewhere - set(inside):
        axes = [k for k, d in enumerate(sdg.nodes[n].domain) if d is dim]
        if axes:
            out[n] = axes[0]
    return out


def _in_loop(sdg: SDG, loop: ast.Loop) -> tuple[dict | None, Expr | None]:
    """node -> (axis of the loop's dim, shift: the node runs dim = counter + shift) for every node
    ``loop`` runs, and that dim; None when a node runs at other points of the loop or along
    another dim."""
    inside, dim = {}, None
    for ex in ast.statements(loop):
        node = sdg.nodes[ex.node_id]
        axes = [(k, offset(e, loop.var)) for k, e in enumerate(ex.point)
                if loop.var in {s.name for s in e.free_symbols()}]
        if len(axes) != 1 or axes[0][1] is None or (dim is not None and node.domain[axes[0][0]] is not dim):
            return None, None
        dim = node.domain[axes[0][0]]
        if inside.setdefault(ex.node_id, axes[0]) != axes[0]:
            return None, None
    return inside, dim


def _peeled(ex: ast.Execute, loop: ast.Loop, after: bool, at: tuple[int, int]) -> bool:
    """Whether ``ex``, a statement ``after`` ``loop`` or before it, runs at the loop's next counter
    value after its last iteration or before its first (``at``: the axis of the loop's dim in its
    point, and the shift its node runs at in the loop): an iteration partial unrolling peeled,
    which reads no lower points than the loop's next or first iteration would."""
    axis, shift = at
    cond = loop.cond
    if not after:
        edge = loop.start - 1
    elif cond.op in ("lt", "le") and cond.args[0].op == "sym" and cond.args[0].name == loop.var:
        edge = cond.args[1] + (1 if cond.op == "le" else 0)
    else:
        return False
    gap = simplify(ex.point[axis] - (edge + shift))
    return gap.is_const and gap.value == 0


def _read_floor(e, axis: int, dim: Expr, var: str, inside: dict) -> Floor | None:
    """The lowest index along axis that edge ``e`` reads from a loop counter ``var`` on, when
    the index never decreases as ``dim`` grows; None when it might, or the reader is outside
    the loop."""
    if e.sink not in inside:
        return None
    index = simplify(e.index.args[axis])
    low = index.args[0] if index.op == "slice" else index
    if not nondecreasing_in(low, dim):
        return None
    at = simplify(symbol(var) + inside[e.sink][1])  # the reader's dim at a loop counter
    return Floor(simplify(low.substitute({dim: at})), at, last_true(e.cond, dim) if e.cond is not None else None)
