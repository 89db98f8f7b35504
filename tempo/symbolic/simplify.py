"""Canonical simplification of symbolic expressions.

``simplify`` folds constants, puts sums into a linear normal form (terms in a
fixed order, constant last), and prunes ``min``/``max`` arguments and decides
comparisons that the known bounds settle: every step symbol ``t`` satisfies
``0 <= t < T`` and every bound ``T >= 1``. The prover behind it
(:func:`prove_nonneg`) is sound: it answers True only when the claim holds for
every assignment that respects those bounds.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from tempo.symbolic.expr import Expr, as_expr, bound_of, const, mul, rebuild

Linear = dict  # atom Expr -> int | Fraction coefficient; key None holds the constant


def linear_form(e: Expr) -> Linear:
    """``e`` as ``{atom: coeff, None: constant}`` over non-linear atoms."""
    if e.op == "const" and not isinstance(e.args[0], bool):
        return {None: e.args[0]}
    if e.op == "add":
        return _lin_add(linear_form(e.args[0]), linear_form(e.args[1]))
    if e.op == "mul":
        a, b = e.args
        if b.op == "const":
            return _lin_scale(linear_form(a), b.args[0])
        if a.op == "const":
            return _lin_scale(linear_form(b), a.args[0])
    return {e: 1, None: 0}


def _lin_add(x: Linear, y: Linear) -> Linear:
    out = dict(x)
    for k, v in y.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0 or k is None}


def _lin_scale(x: Linear, c) -> Linear:
    return {k: v * c for k, v in x.items() if v * c != 0 or k is None}


def from_linear(form: Linear) -> Expr:
    """Rebuild a canonical expression: terms sorted by their text, constant last."""
    terms = sorted(((k, v) for k, v in form.items() if k is not None), key=lambda kv: str(kv[0]))
    out: Expr | None = None
    for atom, coeff in terms:
        term = atom if coeff == 1 else mul(atom, int(coeff))
        out = term if out is None else rebuild("add", (out, term))
    c = int(form.get(None, 0))
    if out is None:
        return const(c)
    return out if c == 0 else rebuild("add", (out, const(c)))


@lru_cache(maxsize=65536)
def simplify(e: Expr) -> Expr:
    """Canonical form of ``e`` (see module docstring)."""
    rule = _RULES.get(e.op)
    if rule is None:
        return e
    return rule(e, tuple(simplify(a) for a in e.args))


def _simplify_linear(e: Expr, args: tuple) -> Expr:
    a, b = args
    if e.op == "mul" and a.op != "const" and b.op != "const":
        a, b = sorted((a, b), key=str)
        return rebuild("mul", (a, b))
    return from_linear(linear_form(rebuild(e.op, (a, b))))


def _simplify_floordiv(e: Expr, args: tuple) -> Expr:
    a, b = args
    if a.op == "const" and b.op == "const":
        return const(a.args[0] // b.args[0])
    if b.op != "const" or b.args[0] <= 0:
        return rebuild("floordiv", (a, b))
    c = b.args[0]
    if c == 1:
        return a
    if a.op == "floordiv" and a.args[1].op == "const" and a.args[1].args[0] > 0:
        return simplify(rebuild("floordiv", (a.args[0], const(a.args[1].args[0] * c))))
    form = linear_form(a)
    whole = {k: v // c for k, v in form.items() if k is not None and v % c == 0}
    rest = {k: v for k, v in form.items() if k is not None and v % c != 0}
    k = form.get(None, 0)
    whole[None], rest[None] = k - k % c, k % c
    if not any(k is not None for k in rest):
        whole[None] = k // c
        return from_linear(whole)
    whole[None] //= c
    rest_expr = from_linear(rest)
    if prove_nonneg(rest_expr) and prove_nonneg(const(c - 1) - rest_expr):
        return from_linear(whole)
    if all(v == 0 for v in whole.values()):
        return rebuild("floordiv", (rest_expr, b))
    return simplify(rebuild("add", (from_linear(whole), rebuild("floordiv", (rest_expr, b)))))


def _simplify_mod(e: Expr, args: tuple) -> Expr:
    a, b = args
    if a.op == "const" and b.op == "const":
        return const(a.args[0] % b.args[0])
    if b.op != "const" or b.args[0] <= 0:
        return rebuild("mod", (a, b))
    c = b.args[0]
    form = {k: v for k, v in linear_form(a).items() if k is None or v % c != 0}
    form[None] = form.get(None, 0) % c
    rest = from_linear(form)
    if rest.op == "const" or (prove_nonneg(rest) and prove_nonneg(const(c - 1) - rest)):
        return rest
    return rebuild("mod", (rest, b))


def _simplify_minmax(e: Expr, args: tuple) -> Expr:
    flat: list[Expr] = []
    for a in args:
        flat.extend(a.args if a.op == e.op else (a,))
    consts = [a.args[0] for a in flat if a.op == "const"]
    items = list(dict.fromkeys(a for a in flat if a.op != "const"))
    if consts:
        items.append(const(min(consts) if e.op == "min" else max(consts)))
    keep = []
    for i, x in enumerate(items):
        dominated = False
        for j, y in enumerate(items):
            if i == j:
                continue
            # min drops x when some y <= x; max drops x when some y >= x
            diff = x - y if e.op == "min" else y - x
            if prove_nonneg(diff) and (j < i or not _proves_both(x, y)):
                dominated = True
                break
        if not dominated:
            keep.append(x)
    if len(keep) == 1:
        return keep[0]
    return rebuild(e.op, tuple(sorted(keep, key=str)))


def _proves_both(x: Expr, y: Expr) -> bool:
    return prove_nonneg(x - y) and prove_nonneg(y - x)


def _simplify_compare(e: Expr, args: tuple) -> Expr:
    a, b = args
    if e.op in ("lt", "le"):
        gap = b - a - 1 if e.op == "lt" else b - a
        if prove_nonneg(gap):
            return const(True)
        if prove_nonneg(const(-1) - gap):
            return const(False)
        return rebuild(e.op, (a, b))
    diff = simplify(a - b)
    if diff.op == "const":
        equal = diff.args[0] == 0
    elif prove_nonneg(diff - 1) or prove_nonneg(const(-1) - diff):
        equal = False
    else:
        a, b = sorted((a, b), key=str)
        return rebuild(e.op, (a, b))
    return const(equal if e.op == "eq" else not equal)


def _simplify_logic(e: Expr, args: tuple) -> Expr:
    if e.op == "not":
        (a,) = args
        if a.op == "const":
            return const(not a.args[0])
        negate = {"not": lambda x: x.args[0], "lt": lambda x: rebuild("le", x.args[::-1]),
                  "le": lambda x: rebuild("lt", x.args[::-1]), "eq": lambda x: rebuild("ne", x.args),
                  "ne": lambda x: rebuild("eq", x.args)}
        return negate[a.op](a) if a.op in negate else rebuild("not", (a,))
    absorbing, neutral = (False, True) if e.op == "and" else (True, False)
    items = []
    for a in dict.fromkeys(_operands(e.op, args)):
        if a.op == "const":
            if bool(a.args[0]) == absorbing:
                return const(absorbing)
            continue
        items.append(a)
    if not items:
        return const(neutral)
    if len(items) == 1:
        return items[0]
    items.sort(key=str)
    out = items[0]
    for item in items[1:]:
        out = rebuild(e.op, (out, item))
    return out


def _operands(op: str, args: tuple) -> list[Expr]:
    """The operands of a chain of ``op`` (``and``/``or`` nest as binary nodes)."""
    out: list[Expr] = []
    for a in args:
        out.extend(_operands(op, a.args) if a.op == op else (a,))
    return out


_RULES = {
    "add": _simplify_linear, "mul": _simplify_linear,
    "floordiv": _simplify_floordiv, "mod": _simplify_mod,
    "min": _simplify_minmax, "max": _simplify_minmax,
    "lt": _simplify_compare, "le": _simplify_compare, "eq": _simplify_compare, "ne": _simplify_compare,
    "and": _simplify_logic, "or": _simplify_logic, "not": _simplify_logic,
    "slice": lambda e, args: rebuild("slice", args), "seq": lambda e, args: rebuild("seq", args),
}


# ----- the prover -----
def prove_nonneg(e) -> bool:
    """True only if ``e >= 0`` for all ``0 <= t < T``, ``T >= 1`` of its symbols."""
    return _prove(_frac_form(as_expr(e)), 0)


def prove_le(a, b) -> bool:
    return prove_nonneg(as_expr(b) - as_expr(a))


def prove_lt(a, b) -> bool:
    return prove_nonneg(as_expr(b) - as_expr(a) - 1)


def _frac_form(e: Expr) -> Linear:
    return {k: Fraction(v) for k, v in linear_form(e).items()}


_MAX_DEPTH = 12


def _prove(form: Linear, depth: int) -> bool:
    """True only if ``form > -1`` everywhere; ``form`` lower-bounds an integer expression.

    An integer exceeding -1 is non-negative, so the rational lower bounds of
    floor divisions (``c*(x // c) >= x - c + 1``) still prove ``x // c >= 0``.
    """
    if depth > _MAX_DEPTH:
        return False
    form = _tighten(form)
    splits = [(k, v) for k, v in form.items() if k is not None and k.op in ("min", "max", "add", "mul")]
    if splits:
        atom, coeff = min(splits, key=_split_rank)
        rest = {k: v for k, v in form.items() if k is not atom}
        if atom.op in ("add", "mul"):
            inner = linear_form(atom)
            if len(inner) == 2 and atom in inner:
                return False  # a genuinely non-linear product
            return _prove(_lin_add(rest, _lin_scale(_to_frac(inner), coeff)), depth + 1)
        branches = [_lin_add(rest, _lin_scale(_frac_form(arg), coeff)) for arg in atom.args]
        need_all = (atom.op == "min") == (coeff > 0)
        results = (_prove(b, depth + 1) for b in branches)
        return all(results) if need_all else any(results)
    lower: Linear = {None: form.get(None, Fraction(0))}
    for atom, coeff in form.items():
        if atom is None:
            continue
        bound = _atom_lower(atom, coeff)
        if bound is None:
            return False
        lower = _lin_add(lower, bound)
    if any(k is not None and (k.op != "sym" or k.kind != "bound") for k in lower):
        return _prove(lower, depth + 1) if lower != form else False
    coeffs = [v for k, v in lower.items() if k is not None]
    return all(c >= 0 for c in coeffs) and sum(coeffs) + lower.get(None, 0) > -1


def _split_rank(item: tuple) -> tuple[bool, bool]:
    """Products split first, then min/max atoms needing every branch, then the rest.

    Proving "for every branch of one atom, some branch of another" succeeds
    more often than the other nesting, and makes the answer less dependent on
    term order (so ``~(a < b)`` and ``b <= a`` simplify alike).
    """
    atom, coeff = item
    return atom.op in ("min", "max"), (atom.op == "min") != (coeff > 0)


def _tighten(form: Linear) -> Linear:
    """``form > -1`` restated over ``Y = (form - c) / g`` when ``Y`` has integer coefficients.

    Atoms are integers, so with ``g`` the gcd of the coefficients ``Y`` is an
    integer and ``g*Y + c > -1`` iff ``Y + ceil((c + 1) / g) - 1 > -1``: the
    claim ``4*(t // 4) >= 0`` becomes ``t // 4 >= 0``.
    """
    coeffs = [v for k, v in form.items() if k is not None]
    if not coeffs or any(v.denominator != 1 for v in coeffs):
        return form
    g = math.gcd(*(int(v) for v in coeffs))
    out = {k: v / g for k, v in form.items() if k is not None}
    out[None] = Fraction(math.ceil((form.get(None, 0) + 1) / Fraction(g)) - 1)
    return out


def _to_frac(form: Linear) -> Linear:
    return {k: Fraction(v) for k, v in form.items()}


def _atom_lower(atom: Expr, coeff: Fraction) -> Linear | None:
    """A linear lower bound of ``coeff * atom`` under the known bounds."""
    if atom.op == "sym":
        if atom.kind == "bound":
            return {atom: coeff, None: Fraction(0)}
        if atom.kind == "step":
            if coeff > 0:
                return {None: Fraction(0)}
            return _lin_scale(_lin_add({bound_of(atom): Fraction(1)}, {None: Fraction(-1)}), coeff)
        return None
    if atom.op in ("floordiv", "mod") and atom.args[1].op == "const" and atom.args[1].args[0] > 0:
        c = atom.args[1].args[0]
        if atom.op == "mod":
            return {None: Fraction(0) if coeff > 0 else coeff * (c - 1)}
        inner = _frac_form(atom.args[0])
        shift = {None: Fraction(-(c - 1))} if coeff > 0 else {None: Fraction(0)}
        return _lin_scale(_lin_add(inner, shift), coeff / c)
    return None
