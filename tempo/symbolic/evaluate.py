"""Evaluating symbolic expressions under an assignment of their symbols.

``evaluate`` interprets an expression once; ``compile_expr`` turns it into a
Python function of an environment (a dict from symbol name to int), which the
runtime calls at every execution of an operator.
"""
from __future__ import annotations

from typing import Callable, Mapping

from tempo.errors import BoundError
from tempo.symbolic.expr import Expr

_PY = {"add": "({} + {})", "mul": "({} * {})", "floordiv": "({} // {})", "mod": "({} % {})",
       "lt": "({} < {})", "le": "({} <= {})", "eq": "({} == {})", "ne": "({} != {})",
       "and": "({} and {})", "or": "({} or {})", "min": "min({})", "max": "max({})", "not": "(not {})",
       "slice": "slice({}, {})"}


def to_python(e: Expr, name: Callable[[str], str] | None = None, spelling: Mapping[str, str] = _PY) -> str:
    """Python source for ``e``; symbols read from the mapping ``env``, or (``name``) from the
    variables ``name(symbol name)``. ``spelling`` gives each operator's source (a format string;
    ``min`` and ``max`` take their arguments joined by commas)."""
    op = e.op
    if op == "const":
        return repr(e.args[0])
    if op == "sym":
        return name(e.args[0]) if name else f"env[{e.args[0]!r}]"
    args = [to_python(a, name, spelling) for a in e.args]
    if op in ("min", "max"):
        return spelling[op].format(", ".join(args))
    if op == "seq":
        return "(" + "".join(a + ", " for a in args) + ")"
    return spelling[op].format(*args)


def compile_expr(e: Expr) -> Callable[[Mapping[str, int]], object]:
    """A function ``env -> value`` computing ``e`` (ints, bools, slices, tuples)."""
    source = f"lambda env: {to_python(e)}"
    fn = eval(source, {"__builtins__": {"min": min, "max": max, "slice": slice}})  # noqa: S307
    return _named(fn, e)


def _named(fn, e: Expr):
    def run(env: Mapping[str, int]):
        try:
            return fn(env)
        except KeyError as missing:
            raise BoundError(f"no value for symbol {missing.args[0]} while evaluating {e}") from None

    run.expr = e  # type: ignore[attr-defined]
    return run


def evaluate(e: Expr, env: Mapping) -> object:
    """Value of ``e``; ``env`` maps symbols (Expr or name) to integers."""
    names = {(k.name if isinstance(k, Expr) else k): v for k, v in env.items()}
    return compile_expr(e)(names)


def shape_at(shape: tuple, env: Mapping[str, int]) -> tuple[int, ...]:
    """The sizes of a shape of ints and expressions (``(T - t, 4)``) at ``env``."""
    return tuple(s if isinstance(s, int) else int(compile_expr(s)(env)) for s in shape)
