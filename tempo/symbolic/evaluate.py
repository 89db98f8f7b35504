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
       "and": "({} and {})", "or": "({} or {})"}


def to_python(e: Expr) -> str:
    """Python source for ``e``; symbols read from the mapping ``env``."""
    op = e.op
    if op == "const":
        return repr(e.args[0])
    if op == "sym":
        return f"env[{e.args[0]!r}]"
    if op in ("min", "max"):
        return f"{op}({', '.join(to_python(a) for a in e.args)})"
    if op == "not":
        return f"(not {to_python(e.args[0])})"
    if op == "slice":
        return f"slice({to_python(e.args[0])}, {to_python(e.args[1])})"
    if op == "seq":
        return "(" + "".join(to_python(a) + ", " for a in e.args) + ")"
    return _PY[op].format(*(to_python(a) for a in e.args))


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
