"""Inversion of dependence expressions, against brute-force enumeration and against isl."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempo.errors import TempoError
from tempo.schedule.isl_expr import access_map
from tempo.symbolic import (Inverse, compile_expr, const, invert, make_slice, max_, min_, seq, simplify,
                            step_and_bound, symbol)

t, T = step_and_bound("t")
BOUNDS = range(1, 13)

shifts, windows, tiles = st.integers(-4, 4), st.integers(1, 5), st.integers(1, 4)
positions = st.integers(-2, 14)


def _tile(z: int):
    return make_slice((t // z) * z, (t // z) * z + z)


# The dependence families of the design, with random constants.
dependences = st.one_of(
    shifts.map(lambda c: t + c),
    positions.map(const),
    shifts.map(lambda c: make_slice(t + c, T)),
    shifts.map(lambda c: make_slice(0, t + c)),
    st.builds(lambda c, w: make_slice(max_(0, t + c - w + 1), t + c + 1), shifts, windows),
    st.builds(lambda c, w: make_slice(t + c, min_(t + c + w, T)), shifts, windows),
    tiles.map(_tile),
    st.builds(lambda a, b: make_slice(a, b), positions, positions),
)


def _points(value, bound: int) -> set[int]:
    if isinstance(value, slice):
        return set(range(max(value.start, 0), min(value.stop, bound)))
    return {value} if 0 <= value < bound else set()


def check_against_enumeration(phi, inverse: Inverse, env=None):
    """For every bound, the inverse names exactly the sink points whose ``phi`` reads each source point."""
    reads, index, condition = compile_expr(phi), compile_expr(inverse.index), compile_expr(inverse.condition)
    for bound in BOUNDS:
        readers: dict[int, set[int]] = {s: set() for s in range(bound)}
        for sink in range(bound):
            for s in _points(reads({**(env or {}), "t": sink, "T": bound}), bound):
                readers[s].add(sink)
        for s in range(bound):
            here = {**(env or {}), "t": s, "T": bound}
            got = _points(index(here), bound) if condition(here) else set()
            assert got == readers[s], (phi, inverse, bound, s)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dependences)
def test_inverse_matches_enumeration(phi):
    inverse = invert(phi, t)
    check_against_enumeration(phi, inverse)
    assert simplify(inverse.index) is inverse.index and simplify(inverse.condition) is inverse.condition


# Monotone bounds built from the same pieces; inversion may refuse them, but never answers wrongly.
_pieces = st.one_of(shifts.map(lambda c: t + c), positions.map(const), shifts.map(lambda c: T + c),
                    st.builds(lambda z, c: (t // z) * z + c, tiles, shifts),
                    st.builds(lambda z, c: t // z + c, tiles, shifts))
monotone = st.recursive(_pieces, lambda c: st.one_of(st.builds(min_, c, c), st.builds(max_, c, c),
                                                     st.builds(lambda e, k: e + k, c, shifts)), max_leaves=4)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(monotone, st.builds(make_slice, monotone, monotone)))
def test_inverse_of_monotone_compositions_is_exact_or_refused(phi):
    try:
        inverse = invert(phi, t)
    except TempoError:
        return
    check_against_enumeration(phi, inverse)


@settings(max_examples=200, deadline=None)
@given(dependences)
def test_inverse_matches_isl(phi):
    inverse = invert(phi, t)
    reads = access_map("sink", [t], "src", [t], seq(phi))
    read_by = access_map("src", [t], "sink", [t], seq(inverse.index), where=inverse.condition)
    assert reads.reverse().is_equal(read_by), (phi, inverse, reads.reverse(), read_by)


# ----- the required exact forms -----
n = symbol("n")


@pytest.mark.parametrize("phi, expected", [
    (make_slice(t, T), make_slice(0, t + 1)),
    (make_slice(0, t + 1), make_slice(t, T)),
    (make_slice(max_(0, t - 3), t + 1), make_slice(t, min_(t + 4, T))),
    (make_slice(t, min_(t + n, T)), make_slice(max_(0, t - n + 1), t + 1)),
    (make_slice(t, min_(t + 3, T)), make_slice(max_(0, t - 2), t + 1)),
    *[(_tile(z), make_slice((t // z) * z, min_((t // z) * z + z, T))) for z in (1, 2, 3, 4)],
])
def test_exact_slice_inverses(phi, expected):
    inverse = invert(phi, t)
    assert inverse.index is simplify(expected)
    assert inverse.condition is const(True)
    check_against_enumeration(phi, inverse, env={"n": 3})


def test_shifted_point_inverts_to_a_point():
    inverse = invert(t + 3, t)
    assert inverse.index is simplify(t - 3)
    check_against_enumeration(t + 3, inverse)
    assert all(compile_expr(inverse.condition)({"t": s, "T": 12}) == (s >= 3) for s in range(12))


def test_constants_invert_to_everything_under_a_condition():
    point = invert(const(5), t)
    assert point.index is make_slice(const(0), T)
    assert point.condition is simplify(t == 5)
    block = invert(make_slice(2, 5), t)
    assert block.index is make_slice(const(0), T)
    assert block.condition is simplify((2 <= t) & (t < 5))


@pytest.mark.parametrize("phi", [2 * t, t * t, T - t, t % 2, make_slice(T - t - 1, T), min_(t + 3, T - 1),
                                 t + t // 2])
def test_non_invertible_forms_raise(phi):
    with pytest.raises(TempoError, match="cannot invert the dependence"):
        invert(phi, t)
