"""Which statements after a loop over a dim that ends at run time read its rows padded past ``T[i]``.

A device loop over iterations that holds such a loop (:attr:`~tempo.plan.loop_plan.LoopPlan.ending`)
runs it to the cap and the statements after it on the cap's rows, masked past ``T[i]``
(:mod:`tempo.plan.ended_rows` has the per-op rules), and a statement that reads its row at ``T - 1``
(:func:`last_row`) with ``T[i] - 1``. :func:`padded_steps` finds those statements and the nested
loops after it that run to ``T``, or says that the loop over iterations must stay on the host.
"""
from __future__ import annotations

from dataclasses import replace

from tempo.ir.ops import UDFOp
from tempo.ir.sdg import SDG
from tempo.plan.ended_rows import island_axes, padded_axes, values_depend
from tempo.plan.loop_plan import ROW, ROWS, STACKED, WINDOW, LoopPlan, Nested, Step
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify


def padded_steps(sdg: SDG, steps: list[Step], nested: list[Nested], ending: int, written_back,
                  bound: Expr) -> tuple | None:
    """The steps after nested loop ``ending`` (the loop over a dim that ends at run time, run to its cap
    on the device) whose inputs or ops' outputs have axes of rows padded past ``T[i]``
    (:func:`tempo.plan.ended_rows.island_axes`), and the nested loops with those of a loop after it that
    runs to ``T`` marked; None where a statement after it cannot run so: one whose condition, reads or
    value depend on ``T`` otherwise, a nested loop after it that depends on ``T`` but by running to it
    (``t < T``, its rows read whole, masked past ``T[i]``), or a read of the ended loop's values but its
    rows whole and its row at ``T - 1`` (:func:`last_row`)."""
    ended = {step.node.id for step in nested[ending].plan.steps}
    to_cap = set()  # the values of nested loops that run to T (their rows past T[i] set to zero)
    nested = list(nested)
    dim = nested[ending].plan.steps[nested[ending].plan.end].node.domain[-1]
    for k, n in enumerate(nested):
        if k == ending:
            continue
        zeros = ended | to_cap  # rows that hold zeros past T[i]
        reads = [src for _, src in n.inputs if src.key[0] in zeros]
        if k < ending and reads or any(_mentions(c, bound) for c in n.guard):
            return None
        if k > ending:
            runs_to, padded = _runs_to(n.plan, bound, zeros), _padded_rows(sdg, n.plan, bound)
            if runs_to is None or padded is None or (padded or reads) and not runs_to or \
                    any(not (src.kind == WINDOW or src.kind == STACKED and src.shift == 0) for src in reads):
                return None  # rows of the iteration read row by row or in windows: zeros past T[i]
            if runs_to:
                to_cap |= {step.node.id for step in n.plan.steps}
                nested[k] = replace(n, plan=replace(n.plan, padded=padded, padded_dim=dim))
    out = []
    for s, step in enumerate(steps):
        if s < nested[ending].at:
            continue
        last = [src.key[0] in ended and last_row(src, bound) for src in step.inputs]
        exprs = [*step.guard, *(c for c in step.conds if c is not None),
                 *(src.index for src, at in zip(step.inputs, last) if src.index is not None and src.kind != ROWS
                   and not at)]
        if any(_mentions(e, bound) for e in exprs) or \
                any(src.key[0] in ended | to_cap and src.kind != ROWS and not at for src, at in zip(step.inputs, last)):
            return None
        edges = sdg.in_edges(step.node.id)
        axes = island_axes(step.node.op, [sdg.read_shape(e) for e in edges], list(step.node.shapes), bound)
        if axes is None:
            return None
        ins, outs = axes
        if isinstance(step.node.op, UDFOp) and any(ins):
            return None  # a sink would see the cap's rows
        if any(padded_axes(shape, bound) for j, shape in enumerate(step.node.shapes)
               if (step.node.id, j) in written_back):
            return None  # rows past the end would be written back
        if any(ins) or any(any(o) for o in outs) or values_depend(step.node.op, bound) or any(last):
            out.append(s)  # rows padded past T[i], a value of T or the row at T - 1, computed at T[i]
    return tuple(out), nested


def last_row(src, bound: Expr) -> bool:
    """Whether ``src`` reads one row of a nested loop's rows (``row``) at ``T - 1`` (``x[i, T - 1]``:
    the last row before the end, which the device picks with ``T[i]``), the other coordinates free of
    ``T``."""
    if src.kind != ROW or any(_mentions(a, bound) for m, a in enumerate(src.index.args) if m != src.shift):
        return False
    row = src.index.args[src.shift]
    names = {x.name for x in row.free_symbols()}
    if names != {bound.name}:
        return False
    at = compile_expr(row)
    return at({bound.name: 100}) == 99 and at({bound.name: 200}) == 199


def _mentions(e: Expr, bound: Expr) -> bool:
    """Whether the schedule's expression ``e`` mentions ``bound`` (by name: the AST's symbols are its own)."""
    return any(x.name == bound.name for x in e.free_symbols())


def _runs_to(loop: LoopPlan, bound: Expr, zeros: set) -> bool | None:
    """True where ``loop`` runs from 0 to ``bound`` (``t < T``), False where its trip count does not
    depend on ``bound``, else None; its steps' conditions and reads must not depend on it either, but
    its windows of rows that hold zeros past ``T[i]`` (``zeros``: the nodes that write them)."""
    exprs = [*(c for step in loop.steps for c in (*step.guard, *step.conds) if c is not None),
             *(src.index for step in loop.steps for src in step.inputs if src.index is not None
               and not (src.kind == WINDOW and src.key[0] in zeros))]
    if any(_mentions(e, bound) for e in exprs) or _mentions(loop.loop.start, bound):
        return None
    if not _mentions(loop.loop.cond, bound):
        return False
    cond = loop.loop.cond
    ok = cond.op == "lt" and cond.args[0].op == "sym" and cond.args[0].name == loop.loop.var and \
        cond.args[1].op == "sym" and cond.args[1].name == bound.name and _is_zero(simplify(loop.loop.start))
    return True if ok else None


def _padded_rows(sdg: SDG, loop: LoopPlan, bound: Expr) -> tuple[int, ...] | None:
    """The steps of ``loop`` (nested in the loop over iterations after the loop over ``bound``'s dim) that
    read values of the iteration padded past ``T[i]``, each row of theirs unpadded; None where a step's
    value depends on ``bound`` otherwise."""
    out = []
    for s, step in enumerate(loop.steps):
        edges = sdg.in_edges(step.node.id)
        if any(src.kind == WINDOW for src in step.inputs):  # read as n rows, zeros past the end (window_padding)
            if values_depend(step.node.op, bound) or any(
                    padded_axes(shape, bound) != () for shape in step.node.shapes) or any(
                    padded_axes(sdg.read_shape(e), bound) != () for e, src in zip(edges, step.inputs)
                    if src.kind != WINDOW):
                return None
            continue
        axes = island_axes(step.node.op, [sdg.read_shape(e) for e in edges], list(step.node.shapes), bound)
        if axes is None or any(padded_axes(shape, bound) for shape in step.node.shapes):
            return None
        if any(axes[0]) or any(any(o) for o in axes[1]) or values_depend(step.node.op, bound):
            out.append(s)
    return tuple(out)


def _is_zero(e: Expr) -> bool:
    return e.is_const and e.value == 0
