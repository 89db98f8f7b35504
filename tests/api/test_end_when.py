"""``tpo.end_when``: a dim whose length is decided per point of its outer dims while the program runs.

Programs drawn by hypothesis (a recurrence over ``t`` per iteration ``i``, ended by a
threshold on it; slices, suffix sums, windows, reads at ``T - 1``, gradients) are checked
against a NumPy loop that breaks at the same step, and against the same program padded to the
cap and masked, which computes the same values with more steps.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo

PROGRAMS = dict(deadline=None, max_examples=12)


def lengths_of(xs: np.ndarray, decay: float, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy loop: ``s[t + 1] = decay * s[t] + x[t + 1]`` until ``s[t] > threshold``; each
    iteration's length (the step after the first that holds, at most the cap) and its ``s``."""
    iterations, cap = xs.shape
    lengths, s = np.full(iterations, cap), np.full(xs.shape, np.nan)
    for i in range(iterations):
        s[i, 0] = xs[i, 0]
        for t in range(cap):
            if s[i, t] > threshold:
                lengths[i] = t + 1
                break
            if t + 1 < cap:
                s[i, t + 1] = decay * s[i, t] + xs[i, t + 1]
    return lengths, s


def build(xs: np.ndarray, w: float, decay: float, threshold: float, dynamic: bool):
    """The program over ``(i, t)``: with ``dynamic``, ``t`` ends at the threshold; else it runs to
    the cap (a flag that never holds ends it) and the steps after the end are masked out.
    Fetches suffix sums, windows, slice sums, a loss's gradients and (dynamic) ``s[i, T - 1]``."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs, dims=(i, t))
        weight = tpo.from_numpy(np.array(w))
        s = tpo.placeholder((), "float64", dims=(i, t))
        s[i, 0] = x[i, 0]
        s[i, t + 1] = s[i, t] * decay + x[i, t + 1]
        ended = s[i, t] > threshold
        if dynamic:
            tpo.end_when(ended)
            xm, sm = x, s
        else:
            tpo.end_when(s[i, t] != s[i, t])  # never holds: the same loops, run to the cap
            m = tpo.placeholder((), "float64", dims=(i, t))  # 1 up to and including the ending step
            m[i, 0] = tpo.ones((), "float64")
            m[i, t + 1] = m[i, t] * (1.0 - ended.cast("float64"))
            xm, sm = x * m, s * m
        suffix = xm[i, t:T].sum()
        window = xm[i, tpo.max(0, t - 2):t + 1].sum()
        total = sm[i, 0:T].sum()
        loss = (weight * xm[i, 0:T] * xm[i, 0:T]).sum()
        loss.backward()
        fetch = [suffix, window, total, loss, weight.grad, x.grad] + ([s[i, T - 1]] if dynamic else [])
        return ctx.compile(fetch=fetch), fetch


def reference(xs, w, decay, threshold):
    lengths, s = lengths_of(xs, decay, threshold)
    suffix, window = np.full(xs.shape, np.nan), np.full(xs.shape, np.nan)
    total, loss, xgrad = np.zeros(len(xs)), np.zeros(len(xs)), np.full(xs.shape, np.nan)
    for i, n in enumerate(lengths):
        row = xs[i, :n]
        suffix[i, :n] = np.cumsum(row[::-1])[::-1]
        window[i, :n] = [row[max(0, t - 2):t + 1].sum() for t in range(n)]
        total[i] = s[i, :n].sum()
        loss[i] = w * (row * row).sum()
        xgrad[i, :n] = 2 * w * row
    wgrad = sum((xs[i, :n] ** 2).sum() for i, n in enumerate(lengths))
    return lengths, [suffix, window, total, loss, wgrad, xgrad, s[np.arange(len(xs)), lengths - 1]]


drawn = st.tuples(st.integers(1, 3), st.integers(2, 10), st.integers(0, 2 ** 16),
                  st.floats(0.5, 1.0), st.floats(0.5, 4.0), st.floats(-2.0, 2.0))


@settings(**PROGRAMS)
@given(drawn)
def test_a_dynamic_program_matches_a_numpy_loop_that_breaks_at_the_same_step(case):
    iterations, cap, seed, decay, threshold, w = case
    xs = np.random.default_rng(seed).uniform(0.0, 1.0, (iterations, cap))
    program, _ = build(xs, w, decay, threshold, dynamic=True)
    out = program.run({"I": iterations, "T": cap})
    lengths, expected = reference(xs, w, decay, threshold)
    np.testing.assert_array_equal(program.lengths["T"], lengths)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


@settings(**PROGRAMS)
@given(drawn)
def test_a_dynamic_program_equals_the_padded_masked_one_and_runs_only_its_steps(case):
    iterations, cap, seed, decay, threshold, w = case
    xs = np.random.default_rng(seed).uniform(0.0, 1.0, (iterations, cap))
    dynamic, _ = build(xs, w, decay, threshold, dynamic=True)
    padded, _ = build(xs, w, decay, threshold, dynamic=False)
    bounds = {"I": iterations, "T": cap}
    got, full = dynamic.run(bounds), padded.run(bounds)
    lengths = dynamic.lengths["T"]
    within = np.arange(cap)[None, :] < lengths[:, None]
    for k in (0, 1, 5):  # over (i, t): equal within each length, nothing past it
        np.testing.assert_allclose(got[k][within], full[k][within], rtol=1e-12, atol=1e-12)
        assert np.isnan(got[k][~within]).all()
    for k in (2, 3, 4):
        np.testing.assert_allclose(got[k], full[k], rtol=1e-12, atol=1e-12)
    assert dynamic.end_checks["T"].steps == lengths.sum()  # one step per t < T[i]
    assert padded.end_checks["T"].steps == iterations * cap
    if lengths.sum() < iterations * cap:
        assert dynamic.ledger.launches < padded.ledger.launches


def sampled(every: int | None, cap: int = 30):
    """A random walk per iteration, ended where it leaves [-2, 2]; its draws are counter-based."""
    with tpo.Context(seed=3) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        step = tpo.random.normal((), dims=(i, t))
        s = tpo.placeholder((), "float32", dims=(i, t))
        s[i, 0] = step[i, 0]
        s[i, t + 1] = s[i, t] + step[i, t + 1]
        tpo.end_when(s.abs() > 2.0)
        tail = s[i, t:T].sum()
        program = ctx.compile(fetch=[s, tail, step[i, 0:T].sum()], config=tpo.Config(end_check_every=every))
    return program, program.run({"I": 6, "T": cap})


@pytest.mark.parametrize("every", [2, 3, 7, 40])
def test_results_and_random_streams_are_the_same_whatever_steps_run_between_reads_of_the_flag(every):
    one, first = sampled(1)
    many, out = sampled(every)
    np.testing.assert_array_equal(one.lengths["T"], many.lengths["T"])
    for a, b in zip(first, out):
        np.testing.assert_array_equal(a, b)
    lengths = one.lengths["T"]
    assert one.end_checks["T"].steps == lengths.sum()
    assert lengths.sum() <= many.end_checks["T"].steps <= lengths.sum() + (every - 1) * len(lengths)
    assert many.end_checks["T"].reads < one.end_checks["T"].reads


def test_a_flag_that_never_holds_runs_to_the_cap():
    program, out = sampled(None, cap=3)
    assert (program.lengths["T"] <= 3).all()
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.ones((2, 5), np.float32), dims=(i, t))
        tpo.end_when(x < 0.0)
        program = ctx.compile(fetch=[x[i, 0:T].sum()])
    (total,) = program.run({"I": 2, "T": 5})
    np.testing.assert_array_equal(program.lengths["T"], [5, 5])
    np.testing.assert_array_equal(total, [5, 5])


def test_block_stores_of_a_dim_that_ends_grow_from_a_few_rows():
    xs = np.linspace(0.0, 1.0, 200).reshape(1, 200)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs, dims=(i, t))
        tpo.end_when(x > 0.3)
        program = ctx.compile(fetch=[x[i, 0:T].sum()])
    (total,) = program.run({"I": 1, "T": 200})
    n = int(program.lengths["T"][0])
    assert n == int(np.argmax(xs[0] > 0.3)) + 1
    np.testing.assert_allclose(total, [xs[0, :n].sum()])
    assert program.ledger.peak["device"] < 200 * 8  # no buffer of the cap's 200 rows


def test_a_read_past_the_runtime_end_names_the_users_line():
    xs = np.arange(12, dtype=np.float32).reshape(2, 6)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs, dims=(i, t))
        tpo.end_when(x >= 2.0)                    # T = 3 at i = 0, 1 at i = 1
        late = x[i, 2] * 2.0
        program = ctx.compile(fetch=[late])
    with pytest.raises(tpo.TempoError, match=r"past the end of t at i=1: T = 1") as err:
        program.run({"I": 2, "T": 6})
    assert "late = x[i, 2] * 2.0" in str(err.value)


def test_end_when_names_what_is_wrong():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.ones(4, np.float32), dims=(t,))
        with pytest.raises(tpo.TempoError, match="varies over no dim"):
            tpo.end_when(tpo.ones((), "bool"))
        tpo.end_when(x > 0.0)
        with pytest.raises(tpo.TempoError, match="already ends"):
            tpo.end_when(x > 1.0)


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("every", [1, 4])
def test_every_backend_ends_where_numpy_does(backend, every):
    pytest.importorskip(backend)
    xs = np.random.default_rng(1).uniform(0.0, 1.0, (3, 12))
    reference, _ = build(xs, 0.5, 0.9, 2.0, dynamic=True)
    expected = reference.run({"I": 3, "T": 12})
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs, dims=(i, t))
        s = tpo.placeholder((), "float64", dims=(i, t))
        s[i, 0] = x[i, 0]
        s[i, t + 1] = s[i, t] * 0.9 + x[i, t + 1]
        tpo.end_when(s[i, t] > 2.0)
        program = ctx.compile(fetch=[x[i, t:T].sum(), x[i, tpo.max(0, t - 2):t + 1].sum(), s[i, 0:T].sum()],
                              backend=backend, config=tpo.Config(end_check_every=every))
    out = program.run({"I": 3, "T": 12})
    np.testing.assert_array_equal(program.lengths["T"], reference.lengths["T"])
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_a_run_stop_when_ends_after_an_iteration_whose_steps_end_when():
    xs = np.random.default_rng(0).uniform(0.0, 1.0, (5, 12))
    lengths, s = lengths_of(xs, 0.9, 2.0)
    totals = np.array([s[k, :n].sum() for k, n in enumerate(lengths)])
    first = int(np.argmax(totals < 5.0))
    assert (totals < 5.0).any() and first < 4
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs, dims=(i, t))
        s_rt = tpo.placeholder((), "float64", dims=(i, t))
        s_rt[i, 0] = x[i, 0]
        s_rt[i, t + 1] = s_rt[i, t] * 0.9 + x[i, t + 1]
        tpo.end_when(s_rt[i, t] > 2.0)
        total = s_rt[i, 0:T].sum()
        tpo.stop_when(total < 5.0)
        program = ctx.compile(fetch=[total])
    (out,) = program.run({"I": 5, "T": 12})
    assert program.stopped_at == {"i": first}
    np.testing.assert_allclose(out[:first + 1], totals[:first + 1])
    assert np.isnan(out[first + 1:]).all()
    np.testing.assert_array_equal(program.lengths["T"][:first + 1], lengths[:first + 1])
    assert (program.lengths["T"][first + 1:] == 0).all()


def test_a_flag_over_two_outer_dims_ends_each_of_their_points_on_its_own():
    xs = np.random.default_rng(0).uniform(0.0, 1.0, (2, 3, 10))
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        x = tpo.from_numpy(xs, dims=(b, i, t))
        s = tpo.placeholder((), "float64", dims=(b, i, t))
        s[b, i, 0] = x[b, i, 0]
        s[b, i, t + 1] = s[b, i, t] + x[b, i, t + 1]
        tpo.end_when(s[b, i, t] > 2.0)
        program = ctx.compile(fetch=[x[b, i, 0:T].sum()])
    (total,) = program.run({B: 2, I: 3, T: 10})
    for key in np.ndindex(2, 3):
        lengths, _ = lengths_of(xs[key][None], 1.0, 2.0)
        assert program.lengths["T"][key] == lengths[0]
        np.testing.assert_allclose(total[key], xs[key][:lengths[0]].sum())


def test_tiles_of_a_dim_that_ends_at_run_time_are_an_error():
    from tempo.transforms import tile

    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.ones((2, 8)), dims=(i, t))
        tpo.end_when(x > 0.0)
        with pytest.raises(tpo.TempoError, match="ends at run time"):
            ctx.compile(fetch=[x[i, 0:T].sum()], passes={"tile": tile.Config(tiles={"t": 4})})


def test_gradients_over_a_dim_that_ends_see_its_length_at_each_outer_point():
    """A parameter over ``i`` read at every ``t`` gets the sum of ``T[i]`` contributions, and the
    gradient of a mean over ``x[i, 0:T]`` divides by ``T[i]``, not by the cap."""
    xs = np.random.default_rng(1).uniform(0.1, 0.4, (3, 12))
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        w = tpo.nn.parameter(np.array(0.5), dims=(i,))
        x = tpo.from_numpy(xs, dims=(i, t))
        s = tpo.placeholder((), "float64", dims=(i, t))
        s[i, 0] = x[i, 0]
        s[i, t + 1] = s[i, t] + x[i, t + 1]
        tpo.end_when(s[i, t] > 1.0)
        loss = (w * x)[i, 0:T].sum() + (w * x)[i, 0:T].mean()
        loss.backward()
        tpo.optim.SGD([w], lr=0.1).step()
        program = ctx.compile(fetch=[w])
    (got,) = program.run({"I": 3, "T": 12})
    lengths, _ = lengths_of(xs, 1.0, 1.0)
    want = [0.5]
    for i, n in enumerate(lengths[:-1]):
        want.append(want[-1] - 0.1 * (xs[i, :n].sum() + xs[i, :n].mean()))
    np.testing.assert_array_equal(program.lengths["T"], lengths)
    np.testing.assert_allclose(got, want, rtol=1e-12)
