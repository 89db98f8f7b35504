"""Simplification preserves meaning and is idempotent; the prover behind it is sound."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from test_expr import SETTINGS, I, T, any_exprs, brute, i, int_exprs, t

from tempo.symbolic import const, make_slice, max_, min_, prove_le, prove_lt, prove_nonneg, seq, simplify


@SETTINGS
@given(any_exprs)
def test_simplify_preserves_values(e):
    assert np.array_equal(brute(simplify(e)), brute(e))


@SETTINGS
@given(any_exprs)
def test_simplify_is_idempotent(e):
    once = simplify(e)
    assert simplify(once) is once


@SETTINGS
@given(int_exprs)
def test_prover_is_sound(e):
    values = brute(e)
    lowest = int(values.min())
    # e itself, e shifted to touch zero (may be provable) and one below (false at the minimum)
    for claim in (e, e - lowest, e - lowest - 1):
        if prove_nonneg(claim):
            assert (brute(claim) >= 0).all(), claim
    assert not prove_nonneg(e - lowest - 1)


def test_simplify_examples():
    assert simplify(max_(0, t)) is t
    assert simplify(min_(t + 1, T)) is simplify(t + 1)
    assert simplify((t + 4) // 4) is simplify(t // 4 + 1)
    assert simplify(t < T) is const(True)
    assert simplify(T <= t) is const(False)
    assert simplify(t + 1 - t) is const(1)
    assert simplify(2 * (t + T) - T) is simplify(T + 2 * t)
    assert simplify((t + 2 * T) % 2) is simplify(t % 2)
    assert simplify((t // 2) // 3) is simplify(t // 6)
    assert simplify(max_(t - 3, 0, t - 1)) is simplify(max_(0, t - 1))
    assert simplify((t < T) & (i < 3)) is simplify(i < 3)
    assert simplify(~(t < 3)) is simplify(3 <= t)
    assert simplify(make_slice(max_(0, t), min_(T, t + 1))) is make_slice(t, simplify(t + 1))
    assert simplify(seq(t + 0, i * 1)) is seq(t, i)


def test_prover_examples():
    assert prove_nonneg(t) and prove_nonneg(T - 1) and prove_nonneg(T - t - 1)
    assert not prove_nonneg(T - t - 2) and not prove_nonneg(t - 1)
    assert prove_nonneg(t // 4) and prove_nonneg(4 * (t // 4)) and prove_nonneg(t % 3)
    assert not prove_nonneg(4 * (t // 4) - t) and not prove_nonneg(t // 4 - 1)
    assert prove_nonneg(min_(t, i)) and not prove_nonneg(max_(t - 1, i - 1))
    assert prove_le(i, I - 1) and prove_lt(t, T) and not prove_lt(t, T - 1)
    assert prove_le(max_(1, t), max_(2, t)) and prove_le(-max_(2, t), -max_(1, t))


def test_found_by_idempotence():
    # a comparison and its negation simplify alike whatever the order of their terms
    assert simplify(~(-max_(1, t) < -max_(2, t))) is const(True)
    # a nested chain of | is flattened whole in one call
    once = simplify((t < 1) | ((0 < t) | ((i < 1) | (0 < min_(1, t)))))
    assert simplify(once) is once
    assert once is simplify((0 < min_(1, t)) | (0 < t) | (i < 1) | (t < 1))
