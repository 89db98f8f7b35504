"""Symbolic integer expressions over temporal symbols.

An :class:`Expr` is immutable, hash-consed plain data ``(op, args)``: two
structurally equal expressions are the same object, so identity is equality
and expressions are cheap dictionary keys.

Python operators build expressions (``t + 1``, ``t < T``, ``(t % 2) == 0``).
``==`` and ``!=`` build comparison nodes too; their truth value is structural
equality after simplification, so ``if a == b`` and dictionary lookups work.
"""
from __future__ import annotations

import functools
import weakref
from _weakref import _remove_dead_weakref
from typing import Union

from tempo.errors import TempoError

ExprLike = Union["Expr", int, bool]

ARITH = ("add", "mul", "floordiv", "mod", "min", "max")
COMPARE = ("lt", "le", "eq", "ne")
LOGIC = ("and", "or", "not")
BOOLEAN = COMPARE + LOGIC


class _KeyedRef(weakref.ref):
    """A weak reference to an interned expression that knows its key in :data:`_INTERNED`."""

    __slots__ = ("key",)


# (op, each arg: a child's id, or a value and its type) -> a weak reference to the one expression with
# them (a child's id is stable while the expression, which holds the child, lives). A plain dict
# of weak references: a lookup and an insertion cost half what ``weakref.WeakValueDictionary``'s
# Python methods do, and a compile builds tens of thousands of expressions.
_INTERNED: dict[tuple, _KeyedRef] = {}


def _forget(ref: _KeyedRef, interned: dict = _INTERNED, remove=_remove_dead_weakref) -> None:
    """Drop a dead expression's entry (where no live one has taken the key since)."""
    remove(interned, ref.key)


class Expr:
    """One node of a symbolic expression.

    ``op`` is one of: ``const`` (args ``(value,)``), ``sym`` (args ``(name,
    kind, dim)`` with kind ``step``, ``bound`` or ``free``), the arithmetic ops
    ``add mul floordiv mod min max``, the comparisons ``lt le eq ne``, the
    logic ops ``and or not``, ``slice`` (args ``(start, stop)``) and ``seq``
    (an index tuple over several dimensions).
    """

    __slots__ = ("op", "args", "__weakref__")

    def __new__(cls, op: str, args: tuple):
        key = (op, *[id(a) if a.__class__ is Expr else (a, a.__class__) for a in args])
        ref = _INTERNED.get(key)
        node = None if ref is None else ref()
        if node is None:
            node = object.__new__(cls)
            object.__setattr__(node, "op", op)
            object.__setattr__(node, "args", args)
            ref = _KeyedRef(node, _forget)
            ref.key = key
            _INTERNED[key] = ref
        return node

    def __setattr__(self, name, value):
        raise AttributeError("Expr is immutable")

    def __reduce__(self):
        return (Expr, (self.op, self.args))

    __hash__ = object.__hash__

    # ----- construction through Python operators -----
    def __add__(self, o: ExprLike) -> Expr:
        return add(self, o)

    def __radd__(self, o: ExprLike) -> Expr:
        return add(o, self)

    def __sub__(self, o: ExprLike) -> Expr:
        return add(self, mul(o, -1))

    def __rsub__(self, o: ExprLike) -> Expr:
        return add(o, mul(self, -1))

    def __mul__(self, o: ExprLike) -> Expr:
        return mul(self, o)

    def __rmul__(self, o: ExprLike) -> Expr:
        return mul(o, self)

    def __neg__(self) -> Expr:
        return mul(self, -1)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return Expr("floordiv", (self, as_expr(o)))

    def __rfloordiv__(self, o: ExprLike) -> Expr:
        return Expr("floordiv", (as_expr(o), self))

    def __mod__(self, o: ExprLike) -> Expr:
        return Expr("mod", (self, as_expr(o)))

    def __rmod__(self, o: ExprLike) -> Expr:
        return Expr("mod", (as_expr(o), self))

    def __lt__(self, o: ExprLike) -> Expr:
        return Expr("lt", (self, as_expr(o)))

    def __le__(self, o: ExprLike) -> Expr:
        return Expr("le", (self, as_expr(o)))

    def __gt__(self, o: ExprLike) -> Expr:
        return Expr("lt", (as_expr(o), self))

    def __ge__(self, o: ExprLike) -> Expr:
        return Expr("le", (as_expr(o), self))

    def __eq__(self, o: object) -> Expr:  # type: ignore[override]
        return Expr("eq", (self, as_expr(o)))  # type: ignore[arg-type]

    def __ne__(self, o: object) -> Expr:  # type: ignore[override]
        return Expr("ne", (self, as_expr(o)))  # type: ignore[arg-type]

    def __and__(self, o: ExprLike) -> Expr:
        return Expr("and", (self, as_expr(o)))

    def __rand__(self, o: ExprLike) -> Expr:
        return Expr("and", (as_expr(o), self))

    def __or__(self, o: ExprLike) -> Expr:
        return Expr("or", (self, as_expr(o)))

    def __ror__(self, o: ExprLike) -> Expr:
        return Expr("or", (as_expr(o), self))

    def __invert__(self) -> Expr:
        return Expr("not", (self,))

    def __bool__(self) -> bool:
        from tempo.symbolic.simplify import simplify

        if self.op == "const":
            return bool(self.args[0])
        if self.op in ("eq", "ne"):
            same = simplify(self.args[0]) is simplify(self.args[1])
            return same if self.op == "eq" else not same
        raise TempoError(f"the symbolic expression {self} has no truth value before run time")

    def __int__(self) -> int:
        if self.op == "const":
            return int(self.args[0])
        raise TempoError(f"the symbolic expression {self} has no integer value before run time")

    # ----- inspection -----
    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def value(self):
        if self.op != "const":
            raise TempoError(f"{self} is not a constant")
        return self.args[0]

    @property
    def is_symbol(self) -> bool:
        return self.op == "sym"

    @property
    def name(self) -> str:
        return self.args[0]

    @property
    def kind(self) -> str:
        return self.args[1]

    @property
    def dim(self) -> str:
        return self.args[2]

    @property
    def children(self) -> tuple[Expr, ...]:
        return () if self.op in ("const", "sym") else self.args

    @property
    def is_boolean(self) -> bool:
        return self.op in BOOLEAN or (self.op == "const" and isinstance(self.args[0], bool))

    def free_symbols(self) -> frozenset[Expr]:
        if self.op == "sym":
            return frozenset((self,))
        out: frozenset[Expr] = frozenset()
        for child in self.children:
            out |= child.free_symbols()
        return out

    def substitute(self, mapping: dict[Expr, ExprLike]) -> Expr:
        """Replace symbols by expressions (no simplification)."""
        if self.op == "sym":
            return as_expr(mapping.get(self, self))
        if self.op == "const":
            return self
        return rebuild(self.op, tuple(c.substitute(mapping) for c in self.args))

    def __repr__(self) -> str:
        return to_str(self)

    __str__ = __repr__


# ----- constructors -----
def const(value: int | bool) -> Expr:
    if isinstance(value, bool):
        return Expr("const", (value,))
    return Expr("const", (int(value),))


def symbol(name: str, kind: str = "free", dim: str | None = None) -> Expr:
    return Expr("sym", (name, kind, dim if dim is not None else name))


def step_and_bound(dim: str) -> tuple[Expr, Expr]:
    """The pair of symbols of one temporal dimension: step ``t`` and bound ``T``."""
    return symbol(dim, "step", dim), symbol(bound_name(dim), "bound", dim)


def bound_name(dim: str) -> str:
    return dim.upper() if dim.upper() != dim else dim + "_bound"


def bound_of(step: Expr) -> Expr:
    return _bound(step.dim)


@functools.cache
def _bound(dim: str) -> Expr:
    """The bound symbol of ``dim``, made once (compilers ask for it at every node and edge)."""
    return step_and_bound(dim)[1]


def step_of(bound: Expr) -> Expr:
    return step_and_bound(bound.dim)[0]


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int)) or type(x).__name__ in ("int64", "int32", "bool_"):
        return const(x if isinstance(x, bool) else int(x))
    if isinstance(x, slice):
        if x.step not in (None, 1):
            raise TempoError(f"temporal slices take step 1 only, got step {x.step}")
        return make_slice(x.start, x.stop)
    if isinstance(x, tuple):
        return seq(*x)
    raise TempoError(f"cannot use {x!r} ({type(x).__name__}) as a symbolic expression")


def add(a: ExprLike, b: ExprLike) -> Expr:
    return Expr("add", (as_expr(a), as_expr(b)))


def mul(a: ExprLike, b: ExprLike) -> Expr:
    return Expr("mul", (as_expr(a), as_expr(b)))


def min_(*args: ExprLike) -> Expr:
    return Expr("min", tuple(as_expr(a) for a in args))


def max_(*args: ExprLike) -> Expr:
    return Expr("max", tuple(as_expr(a) for a in args))


def make_slice(start: ExprLike | None, stop: ExprLike | None) -> Expr:
    if start is None or stop is None:
        raise TempoError("temporal slices need an explicit start and stop (e.g. r[t:T])")
    return Expr("slice", (as_expr(start), as_expr(stop)))


def seq(*items: ExprLike | slice) -> Expr:
    return Expr("seq", tuple(as_expr(i) for i in items))


def logical_and(*args: ExprLike) -> Expr:
    items = [as_expr(a) for a in args]
    if not items:
        return const(True)
    out = items[0]
    for item in items[1:]:
        out = Expr("and", (out, item))
    return out


def rebuild(op: str, args: tuple) -> Expr:
    return Expr(op, args)


# ----- printing -----
_PREC = {"or": 1, "and": 2, "not": 3, "lt": 4, "le": 4, "eq": 4, "ne": 4,
         "add": 5, "mul": 6, "floordiv": 6, "mod": 6}
_INFIX = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "and": "&", "or": "|",
          "floordiv": "//", "mod": "%"}


def to_str(e: Expr, parent: int = 0) -> str:
    op = e.op
    if op == "const":
        return str(e.args[0])
    if op == "sym":
        return e.args[0]
    if op in ("min", "max"):
        return f"{op}({', '.join(to_str(a) for a in e.args)})"
    if op == "slice":
        return f"{to_str(e.args[0])}:{to_str(e.args[1])}"
    if op == "seq":
        return "[" + ", ".join(to_str(a) for a in e.args) + "]"
    if op == "not":
        text = "~" + to_str(e.args[0], _PREC["not"] + 1)
    elif op == "add":
        a, b = e.args
        neg = _negated(b)
        text = f"{to_str(a, 5)} - {to_str(neg, 6)}" if neg is not None else f"{to_str(a, 5)} + {to_str(b, 5)}"
    elif op == "mul":
        a, b = e.args
        if b.op == "const" and b.args[0] == -1:
            text = f"-{to_str(a, 7)}"
        else:
            text = f"{to_str(a, 7)}*{to_str(b, 7)}"
    else:
        prec = _PREC[op]
        text = f"{to_str(e.args[0], prec)} {_INFIX[op]} {to_str(e.args[1], prec + 1)}"
    return f"({text})" if _PREC[op] < parent else text


def _negated(e: Expr) -> Expr | None:
    if e.op == "const" and e.args[0] < 0:
        return const(-e.args[0])
    if e.op == "mul" and e.args[1].op == "const" and e.args[1].args[0] < 0:
        factor = -e.args[1].args[0]
        return e.args[0] if factor == 1 else mul(e.args[0], factor)
    return None

