"""Exact inversion of one temporal dimension's dependence expression.

A sink point ``t`` reads the source points ``phi(t)``: a point (``t + 3``,
``5``) or a slice (``max(0, t - 3):t + 1``). The inverse answers the opposite
question: which sink points ``t'`` read a given source point ``s``? Symbolic
autodiff sums gradient contributions over exactly that set.

For a slice ``a(t):b(t)`` whose bounds never decrease as ``t`` grows, the
sink points reading ``s`` are those with ``a(t') <= s`` (a down-set of ``t'``)
and ``b(t') > s`` (an up-set). Each half is found by solving the monotone,
piecewise-linear inequality for ``t'`` symbolically:

* ``min(A, B) <= v`` iff ``A <= v or B <= v``; ``max(A, B) <= v`` iff ``A <= v and B <= v``
  (and dually for ``>``),
* ``t' + c <= v`` iff ``t' <= v - c``,
* ``k*(u // Z) <= v`` iff ``u <= Z*(v // k) + Z - 1`` for ``k, Z > 0`` (the same
  threshold splits ``k*(u // Z) > v``),
* a term free of ``t'`` gives a condition on ``s`` instead of a threshold.

Forms outside this fragment (``2*t``, ``t*t``, ``t % 2``, decreasing
expressions, or unions the result cannot express) raise :class:`TempoError`.
"""
from __future__ import annotations

from dataclasses import dataclass

from tempo.errors import TempoError
from tempo.symbolic.expr import Expr, bound_of, const, make_slice, max_, min_
from tempo.symbolic.simplify import from_linear, linear_form, simplify

_TRUE, _FALSE = const(True), const(False)


@dataclass(frozen=True)
class Inverse:
    """Sink points ``index(s)`` (a point or a slice) read source point ``s`` when ``condition(s)``."""

    index: Expr
    condition: Expr


class _NotInvertible(Exception):
    """A form the solver cannot invert; :func:`invert` reports it as a TempoError naming ``phi``."""


@dataclass(frozen=True)
class _Half:
    """``{t' <= limit}`` (below) or ``{t' > limit}`` (above) when ``condition`` holds, else empty.

    ``limit`` None means the half is unbounded: every ``t'``.
    """

    limit: Expr | None
    condition: Expr


def invert(phi: Expr, step: Expr) -> Inverse:
    """The exact inverse of the dependence ``phi`` over the step symbol ``step``.

    ``phi(t)`` is the point or slice of source points that sink point ``t``
    reads. The result, also over ``step`` (now naming a source point ``s``),
    satisfies for every ``0 <= s < B`` (``B = bound_of(step)``): the sink
    points ``0 <= t' < B`` with ``s in phi(t')`` are the points of
    ``index(s)`` inside ``[0, B)`` if ``condition(s)`` holds, and none
    otherwise. Raises :class:`TempoError` if ``phi`` cannot be inverted exactly.
    """
    phi = simplify(phi)
    try:
        if phi.op == "slice":
            return _invert_slice(phi.args[0], phi.args[1], step)
        return _invert_point(phi, step)
    except _NotInvertible as why:
        raise TempoError(f"cannot invert the dependence {phi} over {step}: {why}") from None


def _invert_point(p: Expr, step: Expr) -> Inverse:
    """A point ``p`` is the slice ``p:p + 1``; it inverts to a point when both halves meet in one ``t'``."""
    if step not in p.free_symbols():
        return Inverse(simplify(make_slice(0, bound_of(step))), simplify(step == p))
    below, above = _cut(p, step, step, True), _cut(p, step - 1, step, False)
    if below.limit is None or above.limit is None or simplify(above.limit + 1) is not simplify(below.limit):
        return _invert_slice(p, p + 1, step)
    sink = below.limit
    condition = below.condition & above.condition & (0 <= sink) & (sink < bound_of(step))
    return Inverse(simplify(sink), simplify(condition))


def _invert_slice(start: Expr, stop: Expr, step: Expr) -> Inverse:
    below = _cut(simplify(start), step, step, True)   # t' with start(t') <= s
    above = _cut(simplify(stop), step, step, False)   # t' with stop(t') > s
    first = const(0) if above.limit is None else max_(above.limit + 1, 0)
    end = bound_of(step) if below.limit is None else min_(below.limit + 1, bound_of(step))
    return Inverse(simplify(make_slice(first, end)), simplify(below.condition & above.condition))


def _cut(e: Expr, v: Expr, step: Expr, below: bool) -> _Half:
    """``{t' : e(t') <= v}`` if ``below`` else ``{t' : e(t') > v}``, for ``e`` non-decreasing in ``t'``.

    ``e`` is over ``step`` read as ``t'``; ``v`` is over ``step`` read as ``s``.
    """
    form = linear_form(e)
    moving = {atom: k for atom, k in form.items() if atom is not None and step in atom.free_symbols()}
    rest = from_linear({atom: k for atom, k in form.items() if atom not in moving})
    if not moving:
        return _Half(None, rest <= v if below else v < rest)
    if len(moving) > 1:
        raise _NotInvertible(f"{e} has more than one term in {step}")
    (atom, k), = moving.items()
    target = v - rest  # solve k*atom <= target (or k*atom > target)
    if k < 0:
        raise _NotInvertible(f"{e} decreases as {step} grows")
    if atom is step and k == 1:
        return _Half(target, _TRUE)
    if atom.op in ("min", "max"):
        halves = [_cut(simplify(arg * k), target, step, below) for arg in atom.args]
        meet = (atom.op == "max") == below  # max(A, B) <= v: both; max(A, B) > v: either
        out = halves[0]
        for half in halves[1:]:
            out = _meet(out, half, below) if meet else _join(out, half, below, e)
        return out
    if atom.op == "floordiv" and atom.args[1].op == "const" and atom.args[1].value > 0:
        z = atom.args[1].value
        return _cut(atom.args[0], target // k * z + (z - 1), step, below)
    raise _NotInvertible(f"{atom if k == 1 else atom * k} is not a unit step, min, max or floor division")


def _meet(x: _Half, y: _Half, below: bool) -> _Half:
    if x.limit is None or y.limit is None:
        limit = y.limit if x.limit is None else x.limit
    else:
        limit = (min_ if below else max_)(x.limit, y.limit)
    return _Half(limit, x.condition & y.condition)


def _join(x: _Half, y: _Half, below: bool, e: Expr) -> _Half:
    cx, cy = simplify(x.condition), simplify(y.condition)
    if cx is _FALSE:
        return y
    if cy is _FALSE:
        return x
    if cx is not _TRUE or cy is not _TRUE:
        raise _NotInvertible(f"the sink points reading one source point through {e} are not one slice")
    if x.limit is None or y.limit is None:
        return _Half(None, _TRUE)
    return _Half((max_ if below else min_)(x.limit, y.limit), _TRUE)
