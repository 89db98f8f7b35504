"""Symbolic expressions over temporal symbols: build, simplify, evaluate, invert."""
from tempo.symbolic.evaluate import compile_expr, evaluate
from tempo.symbolic.expr import (Expr, as_expr, bound_of, const, make_slice, max_, min_, seq,
                                 step_and_bound, step_of, symbol)
from tempo.symbolic.inversion import Inverse, invert
from tempo.symbolic.simplify import prove_le, prove_lt, prove_nonneg, simplify

__all__ = ["Expr", "Inverse", "as_expr", "bound_of", "compile_expr", "const", "evaluate", "invert",
           "make_slice", "max_", "min_", "prove_le", "prove_lt", "prove_nonneg", "seq", "simplify",
           "step_and_bound", "step_of", "symbol"]
