"""Symbolic expressions: construction, printing, and evaluation against a brute-force interpreter.

The expression strategy and the interpreter here are shared with test_simplify.py.
"""
from __future__ import annotations

import operator
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempo.errors import TempoError
from tempo.symbolic import (Expr, as_expr, compile_expr, const, evaluate, make_slice, max_, min_, seq,
                            step_and_bound, symbol)

t, T = step_and_bound("t")
i, I = step_and_bound("i")

# Every assignment with 1 <= T <= 12, 0 <= t < T and 1 <= I <= 3, 0 <= i < I, one column each.
ASSIGNMENTS = [(tv, Tv, iv, Iv) for Tv in range(1, 13) for tv in range(Tv)
               for Iv in range(1, 4) for iv in range(Iv)]
ENV = {name: np.array(column, dtype=np.int64) for name, column in zip("tTiI", zip(*ASSIGNMENTS))}
ENVS = [dict(zip("tTiI", values)) for values in ASSIGNMENTS]

SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----- random expressions over t, T, i, I -----
def _arith(children):
    small = st.integers(-3, 3)
    positive = st.integers(1, 5)
    return st.one_of(
        st.tuples(children, children).map(lambda p: p[0] + p[1]),
        st.tuples(children, children).map(lambda p: p[0] - p[1]),
        st.tuples(small, children).map(lambda p: p[0] - p[1]),
        st.tuples(children, small).map(lambda p: p[0] * p[1]),
        st.tuples(small, children).map(lambda p: p[0] * p[1]),
        st.tuples(children, positive).map(lambda p: p[0] // p[1]),
        st.tuples(children, positive).map(lambda p: p[0] % p[1]),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: min_(*xs)),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: max_(*xs)),
    )


int_exprs = st.recursive(st.one_of(st.integers(-5, 5).map(const), st.sampled_from([t, T, i, I])),
                         _arith, max_leaves=8)

_COMPARE = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]
comparisons = st.builds(lambda a, cmp, b: cmp(a, b), int_exprs, st.sampled_from(_COMPARE), int_exprs)
bool_exprs = st.recursive(
    comparisons,
    lambda children: st.one_of(st.tuples(children, children).map(lambda p: p[0] & p[1]),
                               st.tuples(children, children).map(lambda p: p[0] | p[1]),
                               children.map(lambda a: ~a)),
    max_leaves=4)
any_exprs = st.one_of(int_exprs, bool_exprs)


def brute(e: Expr, env=ENV):
    """The value of ``e`` at every assignment of ``env`` (NumPy columns), by direct interpretation."""
    if e.op == "const":
        value = e.args[0]
        return np.full(len(ASSIGNMENTS), value, dtype=bool if isinstance(value, bool) else np.int64)
    if e.op == "sym":
        return env[e.name]
    args = [brute(a, env) for a in e.args]
    if e.op == "min":
        return np.minimum.reduce(args)
    if e.op == "max":
        return np.maximum.reduce(args)
    if e.op == "not":
        return ~args[0]
    ops = {"add": np.add, "mul": np.multiply, "floordiv": np.floor_divide, "mod": np.mod,
           "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
           "and": np.logical_and, "or": np.logical_or}
    return ops[e.op](*args)


# ----- properties -----
@SETTINGS
@given(any_exprs)
def test_evaluate_agrees_with_brute_force(e):
    expected = brute(e)
    fn = compile_expr(e)
    assert [fn(env) for env in ENVS] == expected.tolist()
    env = {t: 5, T: 9, i: 0, I: 2}
    assert evaluate(e, env) == expected[ASSIGNMENTS.index((5, 9, 0, 2))]


# ----- unit tests -----
def test_hash_consing_makes_equal_structures_identical():
    assert (t + 1) is (t + 1)
    assert min_(t, T) is min_(t, T)
    assert (t + 1) is not (1 + t)
    assert pickle.loads(pickle.dumps(t * 2 + T)) is t * 2 + T
    assert len({t + 1, t + 1, t + 2}) == 2


def test_the_intern_table_forgets_dead_expressions_and_interns_them_again():
    from tempo.symbolic import expr as expr_mod

    before = len(expr_mod._INTERNED)
    kept = [symbol(f"n{k}") * k + 12345 for k in range(50)]
    assert len(expr_mod._INTERNED) >= before + 100  # each product and each sum
    del kept
    assert len(expr_mod._INTERNED) <= before
    again = symbol("n7") * 7 + 12345
    assert again is symbol("n7") * 7 + 12345 and again.args[1] is const(12345)


def test_expressions_are_immutable():
    with pytest.raises(AttributeError):
        t.op = "const"


def test_printing():
    assert str(t - 3) == "t - 3"
    assert str((t + 1) * 2) == "(t + 1)*2"
    assert str(make_slice(max_(0, t - 3), t + 1)) == "max(0, t - 3):t + 1"
    assert str(seq(t, make_slice(0, T))) == "[t, 0:T]"
    assert str(~((t < T) & ((t % 2) == 0))) == "~(t < T & t % 2 == 0)"


def test_equality_is_symbolic_but_truthy_by_structure():
    assert isinstance(t == t, Expr)
    assert t + 1 == 1 + t
    assert not (t + 1 == t + 2)
    assert t != t + 1
    with pytest.raises(TempoError, match="no truth value"):
        bool(t < T)


def test_symbols_and_substitution():
    n = symbol("n")
    assert (t + n).free_symbols() == frozenset({t, n})
    assert (t.kind, T.kind, n.kind) == ("step", "bound", "free")
    assert (t + n).substitute({n: 3}) is t + 3
    assert int(const(4)) == 4 and const(4).value == 4


def test_as_expr_accepts_ints_slices_tuples_and_rejects_the_rest():
    assert as_expr(3) is const(3)
    assert as_expr(slice(t, T)) is make_slice(t, T)
    assert as_expr((t, slice(0, T))) is seq(t, make_slice(0, T))
    with pytest.raises(TempoError, match="step 1"):
        as_expr(slice(0, T, 2))
    with pytest.raises(TempoError, match="explicit start and stop"):
        as_expr(slice(None, T))
    with pytest.raises(TempoError, match="cannot use"):
        as_expr(1.5)


def test_evaluate_slices_tuples_and_missing_symbols():
    assert evaluate(seq(t - 1, make_slice(t, min_(t + 3, T))), {"t": 4, "T": 6}) == (3, slice(4, 6))
    with pytest.raises(TempoError, match="no value for symbol T"):
        evaluate(t + T, {"t": 1})
