"""Tidying executed sets, remembered by their text: the result is always the set it was given (never
an earlier set's), under its own statement's name, whatever was tidied before and under whatever name.

isl's output form depends on what its context computed before, so results are compared as sets.
"""
import islpy as isl
from hypothesis import given, settings, strategies as st

from tempo.schedule import isl_domains, isl_expr

# a set of a statement over t < T, i < I: a union of strided boxes cut along a diagonal
pieces = st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 3), st.integers(-2, 2),
                   st.integers(0, 3))
names = st.sampled_from(["S1", "S27", "S3"])


def _sets(name: str, parts) -> tuple[isl.Set, isl.Set]:
    box = isl.Set.read_from_str(isl_expr.CTX, f"[T, I] -> {{ {name}[t, i] : 0 <= t < T and 0 <= i < I "
                                              f"and T >= 1 and I >= 1 }}")
    text = " or ".join(f"({lo} <= t <= T - 1 - {hi % 4} and (t - {lo}) mod {stride} = 0 and 0 <= i < I "
                       f"and i <= t + {shift} + {cut})" for lo, hi, stride, shift, cut in parts) or "false"
    points = isl.Set.read_from_str(isl_expr.CTX, f"[T, I] -> {{ {name}[t, i] : {text} }}").intersect(box)
    return points, box


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(pieces, max_size=3), names), min_size=1, max_size=5))
def test_tidied_set_is_the_set_given_under_its_name(calls):
    for parts, name in calls:  # sets seen before, under other names, and new ones
        points, box = _sets(name, parts)
        got = isl_domains._tidy(points, box)
        assert got.get_tuple_name() == name
        assert got.is_equal(points)


@settings(max_examples=30, deadline=None)
@given(st.lists(pieces, min_size=1, max_size=3), st.lists(pieces, min_size=1, max_size=3))
def test_a_changed_set_is_never_given_an_earlier_result(first, second):
    earlier, box = _sets("S5", first)
    isl_domains._tidy(earlier, box)
    later, _ = _sets("S5", second)
    got = isl_domains._tidy(later, box)
    assert got.is_equal(later)
    assert got.is_equal(earlier) == later.is_equal(earlier)


def test_the_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(isl_domains, "_TIDIED_MOST", 2)
    monkeypatch.setattr(isl_domains, "_TIDIED", {})
    for k in range(5):
        points, box = _sets("S1", [(k, 0, 1, 0, 0)])
        assert isl_domains._tidy(points, box).is_equal(points)
        assert len(isl_domains._TIDIED) <= 2
