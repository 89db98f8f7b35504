"""Small questions about how an expression moves with one loop counter, asked by the planners."""
from __future__ import annotations

from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify


def uses(e: Expr, var: str) -> bool:
    """Whether ``e`` reads the symbol named ``var``."""
    return any(s.name == var for s in e.free_symbols())


def counter(e: Expr, var: str) -> Expr | None:
    """The symbol named ``var`` in ``e`` (None when ``e`` does not read it)."""
    return next((s for s in e.free_symbols() if s.name == var), None)


def const_diff(a: Expr, b: Expr) -> int | None:
    """``a - b`` when it simplifies to a constant."""
    d = simplify(a - b)
    return int(d.value) if d.is_const else None


def offset(e: Expr, var: str) -> int | None:
    """``k`` when ``e`` is ``var + k``."""
    v = counter(e, var)
    return None if v is None else const_diff(e, v)


def nondecreasing_in(expr: Expr, dim: Expr) -> bool:
    """Whether ``expr`` depends on no symbol but ``dim`` and never decreases as it grows."""
    if expr.op == "const":
        return True
    if expr.op == "sym":
        return expr is dim
    if expr.op in ("add", "min", "max"):
        return all(nondecreasing_in(a, dim) for a in expr.args)
    if expr.op == "mul":
        scale = [a for a in expr.args if a.is_const]
        varying = [a for a in expr.args if not a.is_const]
        product = 1
        for a in scale:
            product *= a.value
        return len(varying) <= 1 and product >= 0 and all(nondecreasing_in(a, dim) for a in varying)
    if expr.op == "floordiv":
        divisor = expr.args[1]
        return divisor.is_const and divisor.value > 0 and nondecreasing_in(expr.args[0], dim)
    return False


def last_true(cond: Expr, dim: Expr) -> int | None:
    """The largest ``dim`` for which ``cond`` can hold, when ``cond`` bounds it above
    by a constant (``dim == c``, ``dim <= c``, ``dim < c``, or a conjunction with one)."""
    if cond.op == "and":
        lasts = [last for last in (last_true(c, dim) for c in cond.args) if last is not None]
        return min(lasts) if lasts else None
    if cond.op not in ("eq", "le", "lt") or len(cond.args) != 2:
        return None
    left, right = cond.args
    if cond.op == "eq" and right is dim and left.is_const:
        left, right = right, left
    if left is not dim or not right.is_const:
        return None
    return int(right.value) - (cond.op == "lt")
