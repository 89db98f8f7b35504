"""The executor frees each tensor's points once no later iteration can read them."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.runtime.executor import Executor
from tempo.symbolic.affine import nondecreasing_in
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import const, max_, min_, step_and_bound
from tempo.symbolic.simplify import simplify

K, ITERATIONS = 4, 10


def _block_reader_program():
    """s sums x at the start of each block of K iterations; x adds up s, so the two
    recurrences share one loop over i (as parameters and episodes do in PPO).
    ``never_run`` reads x but nothing needs it, so it is never scheduled."""
    ctx = tpo.Context()
    with ctx:
        ((i, I),) = ctx.dims("i")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[0] = tpo.full((), 1.0, "float64")
        s = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[i + 1] = x[i] + s[i]
        s[0] = x[0]
        s[i + 1] = s[i] + x[((i + 1) // K) * K]
        never_run = x * 3.0  # noqa: F841 - a reader that never runs must not pin x
        program = ctx.compile(fetch=[s], passes={"vectorize": False})
    return program, x, s


def test_block_reads_free_all_but_the_current_block():
    program, x, s = _block_reader_program()
    executor = Executor(program.sdg, program.ast, program.backend, {"I": ITERATIONS},
                        keep={s.node.id})
    executor.run()
    # x[8], the last block start read, is all that is left (x[9] is read by no one)
    assert sorted(p[0] for p, _ in executor.stores[(x.node.id, 0)].items()) == [8]
    assert len(list(executor.stores[(s.node.id, 0)].items())) == ITERATIONS  # fetched: kept


def test_freeing_does_not_change_results():
    program, _, _ = _block_reader_program()
    (got,) = program.run({"I": ITERATIONS})
    x, s = [1.0], [1.0]
    for u in range(1, ITERATIONS):
        x.append(x[u - 1] + s[u - 1])
        s.append(s[u - 1] + x[(u // K) * K])
    np.testing.assert_array_equal(got, s)


def test_window_reads_keep_only_the_window():
    """s[i] = s[i-1] + sum(x[max(0, i - 2):i + 1]), x[i] = x[i-1] + s[i-1] / 2: in point stores,
    x keeps only what a later window reads; its window store holds the window's 3 points."""
    ctx = tpo.Context()
    with ctx:
        ((i, I),) = ctx.dims("i")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[0] = tpo.full((), 1.0, "float64")
        x[i + 1] = x[i] + s[i] * 0.5
        s[0] = x[0]
        s[i + 1] = s[i] + x[tpo.max(0, i - 1):i + 2].sum()
        program = ctx.compile(fetch=[s], passes={"vectorize": False})
    executor = Executor(program.sdg, program.ast, program.backend, {"I": ITERATIONS},
                        keep={s.node.id}, stores="point")
    executor.run()
    assert sorted(p[0] for p, _ in executor.stores[(x.node.id, 0)].items()) == [8, 9]  # the next window
    executor = Executor(program.sdg, program.ast, program.backend, {"I": ITERATIONS}, keep={s.node.id})
    executor.run()
    window = executor.stores[(x.node.id, 0)]
    assert (window.kind, window.capacity) == ("window", 3)
    assert sorted(p[0] for p, _ in window.items()) == [7, 8, 9]
    (got,) = program.run({"I": ITERATIONS})
    xs, ss = [1.0], [1.0]
    for u in range(1, ITERATIONS):
        xs.append(xs[u - 1] + ss[u - 1] * 0.5)
        ss.append(ss[u - 1] + sum(xs[max(0, u - 2):u + 1]))
    np.testing.assert_allclose(got, ss, rtol=1e-12)


# ----- the monotonicity test eviction relies on: never claimed for a decreasing index -----
i_sym, _ = step_and_bound("i")


def _arith(children):
    small, positive = st.integers(-3, 3), st.integers(1, 5)
    return st.one_of(
        st.tuples(children, children).map(lambda p: p[0] + p[1]),
        st.tuples(children, children).map(lambda p: p[0] - p[1]),
        st.tuples(children, small).map(lambda p: p[0] * p[1]),
        st.tuples(children, positive).map(lambda p: p[0] // p[1]),
        st.tuples(children, positive).map(lambda p: p[0] % p[1]),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: min_(*xs)),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: max_(*xs)),
    )


indices = st.recursive(st.one_of(st.integers(-5, 5).map(const), st.just(i_sym)), _arith, max_leaves=6)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(indices)
def test_claimed_nondecreasing_indices_never_decrease(index):
    index = simplify(index)
    if not nondecreasing_in(index, i_sym):
        return
    values = [compile_expr(index)({"i": u}) for u in range(40)]
    assert all(a <= b for a, b in zip(values, values[1:])), (index, values)


def test_block_and_window_starts_are_recognised():
    for index in [i_sym - 1, (i_sym // K) * K, max_(0, i_sym - 3), const(0)]:
        assert nondecreasing_in(simplify(index), i_sym), index
    for index in [-i_sym, 5 - i_sym, i_sym % K]:
        assert not nondecreasing_in(simplify(index), i_sym), index
