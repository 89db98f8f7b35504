"""Scheduling-only orderings: validity constraints that carry no data, and the loops the
schedule nests statements in.

The scheduler (:func:`tempo.schedule.isl_schedule.compute_schedule`) orders
statements by their reads; these edges add the orders a program needs
beyond them: a sink runs within the iteration it observes, a
``tpo.stop_when`` check is a barrier between the steps of its dim, and a
``tpo.end_when`` check closes the loop of the dim it ends.

Nesting policy (:func:`nesting`): every statement over a state's dim (the ``i`` of
parameters and optimizer moments, that acting's ``t`` nests in) runs inside the loop over
that dim, at its own step: the loop is the outermost band of the schedule for all of them,
each statement's coordinate along it its own ``i``, and isl schedules one step's statements
(the dependences between statements at the same ``i``). What the loop reads and nothing of
it feeds runs before it; what reads the loop, after it. So what does not depend on the
learner (an environment's done flags, its episode resets) runs in the iteration that uses
it, not in a loop nest of its own before the main loop for all iterations at once, and what
reads a length ``T[i]`` that ``tpo.end_when`` sets runs in the iteration that sets it.
Orderings alone cannot say this: they order a statement after the state at ``i`` and before
the state at ``i + 1``, and isl may then run it at the start of iteration ``i + 1`` (a shift
Feautrier's scheduler takes to carry more dependences). Inside the loop, a statement over a
recurrence's dims that reads no later step of it runs inside that recurrence's loop
(:func:`within_step_loops`), where isl can meet it. A program where a statement reads a later
step of the state's dim, where the loop reads what reads the loop, or with states over more than
one dim that others nest in, keeps isl's own schedule of the whole program. A program with tiles
is nested so where its tiles free nothing large while acting; where they do, shift fusion
(:mod:`tempo.schedule.shift_fusion`) schedules it instead (:func:`tempo.api.stages.schedule`):
it moves the learner's tiles into acting's loop, which needs what they read of the other
statements (an environment's done flags, read whole) computed before acting, where isl's
schedule of the whole program puts them and :func:`within_step_loops` does not.
"""
from __future__ import annotations

from dataclasses import dataclass

from tempo.ir.ends import depends_on_length, ends
from tempo.ir.ops import STOP_LABEL, MergeOp, UDFOp
from tempo.ir.sdg import SDG, Edge
from tempo.symbolic.expr import Expr, bound_of, make_slice, seq
from tempo.symbolic.simplify import simplify

REPORT_LABELS = ("sink", "checkpoint")  # the user functions that report a run's values


def sinks_before_next_state(sdg: SDG, roots) -> list[Edge]:
    """Run each sink within the iteration it observes: before the next value of any state.

    States (parameters, optimizer moments) recur over their last dim; a sink
    over that dim at ``i - 1`` is ordered before the state at ``i``, so a
    progress bar or checkpoint runs as its iteration ends, not after the run.
    A recurrence a sink reads (decoding's tokens) counts as a state for it.
    """
    roots = [n for n in roots if n in sdg.nodes]
    states = [n for n in roots if _recurs(sdg, n)]
    sinks = [n for n in roots if isinstance(sdg.nodes[n].op, UDFOp)]
    out = []
    for s in sinks:
        sink = sdg.nodes[s]
        for p in dict.fromkeys(states + [e.src for e in sdg.in_edges(s) if _recurs(sdg, e.src)]):
            state = sdg.nodes[p]
            if not set(state.domain) <= set(sink.domain):
                continue
            last = state.domain[-1]
            index = seq(*(d - 1 if d is last else d if d in state.domain else make_slice(0, bound_of(d))
                          for d in sink.domain))
            out.append(Edge(p, -1, s, 0, index, last >= 1))
    return out


def _recurs(sdg: SDG, n: int) -> bool:
    return isinstance(sdg.nodes[n].op, MergeOp) and bool(sdg.nodes[n].domain)


@dataclass(frozen=True)
class Nesting:
    """The loops :func:`tempo.schedule.isl_schedule.compute_schedule` nests statements in: ``loop``,
    the dim of the program's states whose loop holds every statement over it (:func:`state_loop`),
    and ``steps``, the orderings that run statements inside the loops of recurrences nested in it
    (:func:`within_step_loops`)."""

    loop: Expr
    steps: list[Edge]


def nesting(sdg: SDG, executed) -> Nesting | None:
    """How the schedule nests the statements of ``sdg`` (see the module's policy). None for a program
    without a state loop (:func:`state_loop`)."""
    loop = state_loop(sdg, executed)
    return None if loop is None else Nesting(loop, within_step_loops(sdg, executed))


def state_loop(sdg: SDG, executed) -> Expr | None:
    """The dim of the program's states (MergeOps over that one dim: parameters, optimizer moments)
    that other dims nest in (acting's ``t`` in ``i``), where there is one such dim. A program with
    one dim (a recurrence over ``t`` alone) has none: what isl computes ahead there is its input,
    read by the loop's steps."""
    outer = {id(d) for n, node in sdg.nodes.items() if n in executed for d in node.domain[:-1]}
    dims = {id(node.domain[0]): node.domain[0] for n, node in sdg.nodes.items()
            if isinstance(node.op, MergeOp) and len(node.domain) == 1 and n in executed and id(node.domain[0]) in outer}
    return next(iter(dims.values())) if len(dims) == 1 else None


def within_step_loops(sdg: SDG, executed) -> list[Edge]:
    """Run every statement over the dims of a recurrence nested in another dim (acting's
    observations over ``(i, t)``) inside that recurrence's loop, at its own step, where the
    statement reads no later step of it (an environment's done flags beside acting; not the
    returns or the learner, which read ahead): the statement at ``(i, t)`` runs after the
    recurrence at ``(i, t)``, and all of it at ``t - 1`` runs before the recurrence at ``t``."""
    states: dict[tuple, int] = {}
    for n, node in sdg.nodes.items():
        if isinstance(node.op, MergeOp) and len(node.domain) > 1 and n in executed:
            states.setdefault(tuple(map(id, node.domain)), n)
    out = []
    for p in states.values():
        dims = sdg.nodes[p].domain
        last, ahead = dims[-1], _reading_ahead(sdg, dims[-1])
        for n, node in sdg.nodes.items():
            inside = tuple(map(id, node.domain[:len(dims)])) == tuple(map(id, dims))
            if n == p or n not in executed or n in ahead or _reports(node) or not inside:
                continue
            out.append(Edge(n, -1, p, 0, seq(*dims)))
            index = seq(*(last - 1 if d is last else d if any(d is x for x in dims) else make_slice(0, bound_of(d))
                          for d in node.domain))
            out.append(Edge(p, -1, n, 0, index, last >= 1))
    return out


def _reports(node) -> bool:
    """Whether ``node`` is a sink or a checkpoint: :func:`sinks_before_next_state` places those."""
    return isinstance(node.op, UDFOp) and node.op.label in REPORT_LABELS


def _reading_ahead(sdg: SDG, dim: Expr) -> set[int]:
    """The nodes that read, or read what reads, a step of ``dim`` past their own."""
    ahead = set()
    for e in sdg.edges:
        axis = next((k for k, d in enumerate(sdg.nodes[e.src].domain) if d is dim), None)
        if axis is None:
            continue
        index = e.index.args[axis]
        end = simplify((index.args[1] - 1 if index.op == "slice" else index) - dim)
        if not (end.is_const and end.value <= 0):
            ahead.add(e.sink)
    todo = list(ahead)
    while todo:
        n = todo.pop()
        for e in sdg.edges:
            if e.src == n and e.sink not in ahead:
                ahead.add(e.sink)
                todo.append(e.sink)
    return ahead


def stops_early(sdg: SDG, executed) -> list[Edge]:
    """Make each ``tpo.stop_when`` check a barrier between the steps of its flag's last dim:
    the check at a step runs after everything at the step before, and before everything at
    its own step that the flag does not read and everything at the next step; so a run it
    ends computes nothing past what decided it. Sinks and checkpoints of nothing but what the
    flag reads run before the check at their step, so they report the step that stops the run. The checks of ``tpo.end_when`` count as read:
    what the flag reads may depend on the lengths they set."""
    def at(dims, of, shift):  # the point of ``of``'s dims at ``dims``' step, ``shift`` back along the last
        return seq(*(d - shift if d is last else d if any(x is d for x in dims)
                     else make_slice(0, bound_of(d)) for d in of))

    out = []
    for s, stop in sdg.nodes.items():
        if not (isinstance(stop.op, UDFOp) and stop.op.label == STOP_LABEL and stop.domain):
            continue
        last = stop.domain[-1]
        reads = _same_step_reads(sdg, s, last)
        for c in ends(sdg).values():  # an end check, and what it reads, decide the step too
            reads |= {c} | _same_step_reads(sdg, c, last)
        observers = _observers(sdg, executed, reads, last)
        for k in observers:  # a sink of what decided the step reports it before the check
            out.append(Edge(s, -1, k, 0, at(stop.domain, sdg.nodes[k].domain, 0)))
        reads |= observers
        for n, node in sdg.nodes.items():
            if n == s or n not in executed or not any(d is last for d in node.domain):
                continue
            shift = 1 if n in reads else 0
            out.append(Edge(n, -1, s, 0, at(node.domain, stop.domain, shift), last >= 1 if shift else None))
            out.append(Edge(s, -1, n, 0, at(stop.domain, node.domain, 1), last >= 1))
    return out


def _observers(sdg: SDG, executed, reads: set[int], dim: Expr) -> set[int]:
    """The sinks and checkpoints over ``dim`` that read, at their step, nothing but ``reads``: a check that
    stops the run runs after them, so they report the step that decided it."""
    return {n for n, node in sdg.nodes.items()
            if n in executed and isinstance(node.op, UDFOp) and node.op.label in REPORT_LABELS
            and any(d is dim for d in node.domain) and _same_step_reads(sdg, n, dim) <= reads}


def _same_step_reads(sdg: SDG, n: int, dim: Expr) -> set[int]:
    """The nodes ``n`` reads, transitively, at its own step of ``dim`` or may (every read but
    one of earlier steps only: ``dim - c`` or a slice that ends before ``dim``)."""
    seen, todo = set(), [n]
    while todo:
        for e in sdg.in_edges(todo.pop()):
            axis = next((k for k, d in enumerate(sdg.nodes[e.src].domain) if d is dim), None)
            if e.src in seen or (axis is not None and _earlier(e.index.args[axis], dim)):
                continue
            seen.add(e.src)
            todo.append(e.src)
    return seen


def _earlier(index: Expr, dim: Expr) -> bool:
    """Whether ``index``, a read along ``dim``, reads only steps before ``dim``."""
    end = simplify((index.args[1] - 1 if index.op == "slice" else index) - dim)
    return end.is_const and end.value < 0


def ends_early(sdg: SDG, executed) -> list[Edge]:
    """Order each ``tpo.end_when`` check of a dim ``t`` (over outer dims ``i``) so that the loop over
    ``t`` exits where it sets ``T[i]``: every step ``t`` of a tensor over ``i`` and ``t`` runs after
    the check at ``t - 1`` and after the check that ends iteration ``i - 1`` (so the loop over ``t``
    lies inside the loops over the outer dims, each point of them in order), and every tensor over
    ``i`` that depends on ``T`` (reads a slice ending at it, has a shape or a value that mentions it,
    or is vectorized over ``t``) runs after the check at ``T - 1``, once ``T[i]`` is known, and
    before the checks of iteration ``i + 1``."""
    out = []
    for t, s in ends(sdg).items():
        check = sdg.nodes[s]
        outer = check.domain[:-1]
        for n, node in sdg.nodes.items():
            if n == s or n not in executed or not all(any(x is d for x in node.domain) for d in outer):
                continue
            if depends_on_length(sdg, n, t):
                out.append(Edge(n, -1, s, 0, seq(*outer, bound_of(t) - 1)))
            elif any(d is t for d in node.domain):
                out.append(Edge(n, -1, s, 0, seq(*outer, t - 1), t >= 1))
                for k, d in enumerate(outer):  # after the last check of the outer point before this one
                    out.append(Edge(n, -1, s, 0, seq(*_before(outer, k), bound_of(t) - 1), d >= 1))
            else:
                continue
            for k, d in enumerate(outer):  # before the checks of the outer point after this one
                at = dict(zip(outer, _before(outer, k)))
                index = seq(*(at[x] if x in at else make_slice(0, bound_of(x)) for x in node.domain))
                out.append(Edge(s, -1, n, 0, index, d >= 1))
    return out


def _before(outer: tuple, k: int) -> tuple:
    """The last point of ``outer``'s dims before the point where the ``k``-th of them steps back by
    one: ``(i0, ..., ik - 1, I(k+1) - 1, ...)``."""
    return (*outer[:k], outer[k] - 1, *(bound_of(d) - 1 for d in outer[k + 1:]))

