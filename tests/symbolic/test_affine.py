"""The planners' questions about one loop counter (tempo/symbolic/affine.py)."""
from __future__ import annotations

from tempo.symbolic.affine import const_diff, counter, last_true, offset, uses
from tempo.symbolic.expr import Expr, const, step_and_bound

(t, T), (i, _) = step_and_bound("t"), step_and_bound("i")


def test_uses_and_counter_find_the_counter_by_name():
    assert uses(t + 2, "t") and not uses(i + 2, "t") and not uses(T - 1, "t")
    assert counter((t // 4) * 4, "t") is t and counter(i, "t") is None


def test_offset_is_the_constant_shift_from_the_counter():
    assert offset(t + 3, "t") == 3 and offset(t - 1, "t") == -1 and offset(t, "t") == 0
    assert offset(t * 2, "t") is None and offset(i + 1, "t") is None and offset(T - t, "t") is None
    assert const_diff(T - 1, T - 3) == 2 and const_diff(T, t) is None


def test_last_true_reads_an_upper_bound_on_the_dim():
    assert last_true(Expr("le", (t, const(4))), t) == 4
    assert last_true(Expr("lt", (t, const(4))), t) == 3
    assert last_true(Expr("eq", (const(2), t)), t) == 2
    assert last_true(Expr("and", (Expr("ge", (t, const(1))), Expr("lt", (t, const(5))))), t) == 4
    assert last_true(Expr("ge", (t, const(1))), t) is None
