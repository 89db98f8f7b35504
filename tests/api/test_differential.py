"""Differential tests: Tempo recurrence programs against plain NumPy loops.

Each test builds a small program with recurrent tensors (RTs), runs it on the
NumPy backend and compares every fetched tensor with a reference computed by
an explicit Python/NumPy loop over the temporal dimensions.  The programs
cover the access patterns of TEMPO Fig. 2 (point, causal, anti-causal,
backward/forward windows, blocks, constant indices/slices, strides),
branching definitions, conditions, ``eval_symbol``, multi-dimensional domains,
dynamic-size reductions and matmuls over dynamic axes. Every program runs
both with the stores its reads call for and with point stores only.
"""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo

RTOL = 1e-6
ATOL = 1e-10


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def data(seed: int, *shape: int) -> np.ndarray:
    """Small float64 random data, reproducible by seed."""
    return np.random.default_rng(seed).standard_normal(shape)


def positive(seed: int, *shape: int) -> np.ndarray:
    """Strictly positive float64 random data (for log / sqrt / division)."""
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape)


def check(actual, expected) -> None:
    """Same shape, values close at rtol 1e-6 (NaNs must match)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)


def check_int(actual, expected) -> None:
    """Exact equality for integer results, with an integer dtype."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.issubdtype(actual.dtype, np.integer), actual.dtype
    np.testing.assert_array_equal(actual, expected)


def run(ctx, bounds, *fetch):
    """ctx's program on the NumPy backend, run with the tensor stores its reads call for
    (block and window stores) and with point stores only, which must agree to the last bits a
    reduction's order decides (a block store lays its rows out where its readers permute them,
    and NumPy sums a contiguous axis pairwise: 1e-13 relative in float64, 1e-6 in float32);
    one array per fetched RT."""
    program = ctx.compile(fetch=list(fetch), backend="numpy")
    out = program.run(bounds)
    for chosen, point in zip(out, program.run(bounds, stores="point")):
        if np.issubdtype(np.asarray(chosen).dtype, np.floating):
            wide = np.asarray(chosen).dtype == np.float64
            np.testing.assert_allclose(chosen, point, rtol=1e-13 if wide else 1e-6, atol=1e-15 if wide else 1e-7)
        else:
            np.testing.assert_array_equal(chosen, point)
    assert len(out) == len(fetch)
    return [np.asarray(o) for o in out]


def ph(shape=(), dims=()):
    """A float64 branching placeholder."""
    return tpo.placeholder(shape=shape, dtype="float64", dims=dims)


def discounted(x: np.ndarray, gamma: float) -> float:
    """sum_k gamma**k x[k] over the leading axis."""
    return sum(gamma**k * x[k] for k in range(len(x)))


# --------------------------------------------------------------------------
# point accesses (Fig. 2a)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_point_identity(T_):
    """Point access x[t] (identity, explicit and implicit)."""
    x = data(0, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        y = r * 2.0 + 1.0
        z = r[t] - 3.0
        a, b = run(ctx, {T: T_}, y, z)
    check(a, x * 2.0 + 1.0)
    check(b, x - 3.0)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_point_previous_guarded_by_max(T_):
    """Point access x[max(t-1, 0)] (previous step, clamped)."""
    x = data(1, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        y = r - r[tpo.max(t - 1, 0)]
        (a,) = run(ctx, {T: T_}, y)
    expected = np.array([x[u] - x[max(u - 1, 0)] for u in range(T_)])
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_point_previous_guarded_by_branch(T_):
    """Point access x[t-1] inside a branching definition (first differences)."""
    x = data(2, T_, 3)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        d = ph(shape=(3,), dims=(t,))
        d[0] = r[0]
        d[t + 1] = r[t + 1] - r[t]
        (a,) = run(ctx, {T: T_}, d)
    expected = x.copy()
    expected[1:] = x[1:] - x[:-1]
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_point_next_guarded_by_min(T_):
    """Point access x[min(t+1, T-1)] (next step, clamped)."""
    x = data(3, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        y = r[tpo.min(t + 1, T - 1)] * r
        (a,) = run(ctx, {T: T_}, y)
    expected = np.array([x[min(u + 1, T_ - 1)] * x[u] for u in range(T_)])
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_point_next_guarded_by_condition_branch(T_):
    """Point access x[t+1] guarded by a branching definition with a condition key."""
    x = data(4, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[t < T - 1] = r[t + 1] - r
        s[t == T - 1] = r
        (a,) = run(ctx, {T: T_}, s)
    expected = np.array([x[u + 1] - x[u] if u < T_ - 1 else x[u] for u in range(T_)])
    check(a, expected)


# --------------------------------------------------------------------------
# branching definitions (recurrences)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_branching_prefix_sum(T_):
    """Branching recurrence s[0] = r[0], s[t+1] = s[t] + r[t+1] (prefix sum)."""
    x = data(5, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[0] = r[0]
        s[t + 1] = s[t] + r[t + 1]
        (a,) = run(ctx, {T: T_}, s)
    check(a, np.cumsum(x))


@pytest.mark.parametrize("T_", [2, 5, 8])
def test_branching_two_step_fibonacci(T_):
    """Two-step recurrence s[0], s[1], s[t+2] = s[t+1] + 0.5 s[t] + r[t+2]."""
    x = data(6, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[0] = r[0]
        s[1] = r[1] + 1.0
        s[t + 2] = s[t + 1] + 0.5 * s[t] + r[t + 2]
        (a,) = run(ctx, {T: T_}, s)
    expected = np.zeros(T_)
    expected[0] = x[0]
    expected[1] = x[1] + 1.0
    for u in range(2, T_):
        expected[u] = expected[u - 1] + 0.5 * expected[u - 2] + x[u]
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_branching_rnn_two_rts_vector_state(T_):
    """Recurrence combining two RTs and a plain tensor: h[t+1] = tanh(W h[t]) * g[t+1] + x[t+1]."""
    D = 3
    x = data(7, T_, D)
    g = positive(8, T_, D)
    W = data(9, D, D) * 0.5
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        xr = tpo.from_numpy(x, dims=(t,))
        gr = tpo.from_numpy(g, dims=(t,))
        Wr = tpo.from_numpy(W, dims=())
        h = ph(shape=(D,), dims=(t,))
        h[0] = xr[0]
        h[t + 1] = (Wr @ h[t]).tanh() * gr[t + 1] + xr[t + 1]
        (a,) = run(ctx, {T: T_}, h)
    expected = np.zeros((T_, D))
    expected[0] = x[0]
    for u in range(1, T_):
        expected[u] = np.tanh(W @ expected[u - 1]) * g[u] + x[u]
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_branching_mutual_recurrence(T_):
    """Two placeholders defined from each other's previous step."""
    x = data(10, T_)
    y = data(11, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        xr = tpo.from_numpy(x, dims=(t,))
        yr = tpo.from_numpy(y, dims=(t,))
        a = ph(dims=(t,))
        b = ph(dims=(t,))
        a[0] = xr[0]
        b[0] = yr[0]
        a[t + 1] = a[t] + b[t] * xr[t + 1]
        b[t + 1] = 0.5 * b[t] - a[t] + yr[t + 1]
        out_a, out_b = run(ctx, {T: T_}, a, b)
    ea = np.zeros(T_)
    eb = np.zeros(T_)
    ea[0], eb[0] = x[0], y[0]
    for u in range(1, T_):
        ea[u] = ea[u - 1] + eb[u - 1] * x[u]
        eb[u] = 0.5 * eb[u - 1] - ea[u - 1] + y[u]
    check(out_a, ea)
    check(out_b, eb)


@pytest.mark.parametrize("T_", [1, 5, 10])
def test_branching_segmented_prefix_sum_condition_key(T_):
    """Branching with a condition key: prefix sum reset every 3 steps."""
    x = data(12, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[0] = r[0]
        s[(t % 3) == 0] = r
        s[t + 1] = s[t] + r[t + 1]
        (a,) = run(ctx, {T: T_}, s)
    expected = np.zeros(T_)
    for u in range(T_):
        expected[u] = x[u] if u % 3 == 0 else expected[u - 1] + x[u]
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_branching_condition_key_even_odd(T_):
    """Branching with complementary condition keys (t % 2 == 0 / == 1)."""
    x = data(13, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[(t % 2) == 0] = r * 2.0
        s[(t % 2) == 1] = -r
        (a,) = run(ctx, {T: T_}, s)
    expected = np.array([x[u] * 2.0 if u % 2 == 0 else -x[u] for u in range(T_)])
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_branching_backward_recurrence_returns(T_):
    """Anti-causal recurrence g[T-1] = r, g[t] = r + 0.9 g[t+1] (condition keys)."""
    x = data(14, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        g = ph(dims=(t,))
        g[t == T - 1] = r
        g[t < T - 1] = r + 0.9 * g[t + 1]
        (a,) = run(ctx, {T: T_}, g)
    expected = np.array([discounted(x[u:], 0.9) for u in range(T_)])
    check(a, expected)


# --------------------------------------------------------------------------
# slices: causal, anti-causal, windows, blocks (Fig. 2b-2f)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_causal_slice_reductions(T_):
    """Causal slice x[0:t+1] reduced by sum / max / mean / min."""
    x = data(15, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        past = r[0:t + 1]
        outs = run(ctx, {T: T_}, past.sum(), past.max(), past.mean(), past.min())
    check(outs[0], [x[: u + 1].sum() for u in range(T_)])
    check(outs[1], [x[: u + 1].max() for u in range(T_)])
    check(outs[2], [x[: u + 1].mean() for u in range(T_)])
    check(outs[3], [x[: u + 1].min() for u in range(T_)])


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_anticausal_slice_reductions(T_):
    """Anti-causal slice x[t:T] reduced by sum / min / mean."""
    x = data(16, T_, 2)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        fut = r[t:T]
        outs = run(ctx, {T: T_}, fut.sum(axis=0), fut.min(), fut.mean(axis=1).max())
    check(outs[0], np.array([x[u:].sum(axis=0) for u in range(T_)]))
    check(outs[1], np.array([x[u:].min() for u in range(T_)]))
    check(outs[2], np.array([x[u:].mean(axis=1).max() for u in range(T_)]))


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_anticausal_discounted_returns(T_):
    """Anti-causal slice r[t:T].discounted_sum(0.9) (Monte-Carlo returns)."""
    x = data(17, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        g = r[t:T].discounted_sum(0.9)
        (a,) = run(ctx, {T: T_}, g)
    check(a, [discounted(x[u:], 0.9) for u in range(T_)])


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_backward_window_mean(T_):
    """Backward window x[max(0, t-w+1):t+1].mean(axis=0) on vectors (w = 3)."""
    w = 3
    x = data(18, T_, 2)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        m = r[tpo.max(0, t - w + 1):t + 1].mean(axis=0)
        s = r[tpo.max(0, t - w + 1):t + 1].sum()
        a, b = run(ctx, {T: T_}, m, s)
    check(a, np.array([x[max(0, u - w + 1): u + 1].mean(axis=0) for u in range(T_)]))
    check(b, np.array([x[max(0, u - w + 1): u + 1].sum() for u in range(T_)]))


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_forward_window_nstep_returns(T_):
    """Forward window r[t:min(t+n, T)] (n-step discounted returns and sums)."""
    n = 3
    x = data(19, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        g = r[t:tpo.min(t + n, T)].discounted_sum(0.9)
        s = r[t:tpo.min(t + n, T)].sum()
        a, b = run(ctx, {T: T_}, g, s)
    check(a, [discounted(x[u: min(u + n, T_)], 0.9) for u in range(T_)])
    check(b, [x[u: min(u + n, T_)].sum() for u in range(T_)])


@pytest.mark.parametrize("T_", [4, 8, 12])
def test_block_access(T_):
    """Block access x[(t//Z)*Z:(t//Z)*Z+Z] with T a multiple of Z = 4."""
    Z = 4
    x = data(20, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        blk = r[(t // Z) * Z:(t // Z) * Z + Z]
        a, b, c = run(ctx, {T: T_}, blk.sum(), blk.max(), blk)
    check(a, [x[(u // Z) * Z:(u // Z) * Z + Z].sum() for u in range(T_)])
    check(b, [x[(u // Z) * Z:(u // Z) * Z + Z].max() for u in range(T_)])
    # static block shape (Z,): the block itself can be fetched, shape (T, Z)
    check(c, np.stack([x[(u // Z) * Z:(u // Z) * Z + Z] for u in range(T_)]))


@pytest.mark.parametrize("T_", [3, 5, 8])
def test_constant_index(T_):
    """Constant point index x[2] and x[0] (removes t from the domain)."""
    x = data(21, T_, 2)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        y = r - r[2]
        first = r[0]
        a, b = run(ctx, {T: T_}, y, first)
    check(a, x - x[2])
    check(b, x[0])


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_constant_slice(T_):
    """Constant slice x[0:T] (no temporal dim; leading spatial axis of size T)."""
    x = data(22, T_)
    v = data(23, T_, 3)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        rv = tpo.from_numpy(v, dims=(t,))
        whole = r[0:T]
        centred = r - r[0:T].mean()
        vsum = rv[0:T].sum(axis=0)
        a, b, c, d = run(ctx, {T: T_}, whole, centred, vsum, rv[0:T])
    check(a, x)
    check(b, x - x.mean())
    check(c, v.sum(axis=0))
    check(d, v)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_cumsum_then_spatial_index_by_symbol(T_):
    """x[0:T].cumsum() then .spatial[t] (symbol index adds t back to the domain)."""
    x = data(24, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        c = r[0:T].cumsum(axis=0)
        y = c.spatial[t]
        a, b = run(ctx, {T: T_}, c, y)
    check(a, np.cumsum(x))
    check(b, np.cumsum(x))


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_strided_access_guarded_by_min(T_):
    """Strided points x[min(2*t, T-1)] and x[min(t*2+1, T-1)]."""
    x = data(25, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        even = r[tpo.min(2 * t, T - 1)]
        odd = r[tpo.min(t * 2 + 1, T - 1)]
        a, b = run(ctx, {T: T_}, even, odd)
    check(a, [x[min(2 * u, T_ - 1)] for u in range(T_)])
    check(b, [x[min(2 * u + 1, T_ - 1)] for u in range(T_)])


@pytest.mark.parametrize("T_", [2, 6, 8])
def test_strided_access_guarded_by_condition(T_):
    """Strided point x[2*t] inside a branch with condition 2*t < T."""
    x = data(26, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        s = ph(dims=(t,))
        s[2 * t < T] = r[2 * t]
        s[2 * t >= T] = tpo.zeros((), dtype="float64")
        (a,) = run(ctx, {T: T_}, s)
    check(a, [x[2 * u] if 2 * u < T_ else 0.0 for u in range(T_)])


@pytest.mark.parametrize("I_", [1, 3, 4])
def test_strided_access_across_dims(I_):
    """Strided x[2*i] / x[2*i+1] of an RT over t read from dim i (T = 2I): downsampling."""
    T_ = 2 * I_
    x = data(27, T_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(t,))
        pooled = (r[tpo.min(2 * i, T - 1)] + r[tpo.min(2 * i + 1, T - 1)]) * 0.5
        (a,) = run(ctx, {I: I_, T: T_}, pooled)
    check(a, (x[0::2] + x[1::2]) * 0.5)


# --------------------------------------------------------------------------
# conditions
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_condition_index_fetch(T_):
    """Condition x[(t % 2) == 0]: NaN (floats) / 0 (ints) where undefined."""
    x = data(28, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        c = r[(t % 2) == 0]
        k = tpo.eval_symbol(t)[(t % 3) == 0]
        a, b = run(ctx, {T: T_}, c, k)
    u = np.arange(T_)
    check(a, np.where(u % 2 == 0, x, np.nan))
    check_int(b, np.where(u % 3 == 0, u, 0))


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_condition_logic_operators(T_):
    """Conditions combined with & | ~ on symbols."""
    x = data(29, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        c1 = r[((t % 2) == 0) | (t == T - 1)]
        c2 = r[(t >= 1) & (t < T - 1)]
        c3 = r[~((t % 3) == 0)]
        a, b, c = run(ctx, {T: T_}, c1, c2, c3)
    u = np.arange(T_)
    check(a, np.where((u % 2 == 0) | (u == T_ - 1), x, np.nan))
    check(b, np.where((u >= 1) & (u < T_ - 1), x, np.nan))
    check(c, np.where(u % 3 != 0, x, np.nan))


# --------------------------------------------------------------------------
# eval_symbol
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_eval_symbol_values(T_):
    """eval_symbol of t, T - t, 2t + 1, t // 2, t % 3 (int64 RTs)."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        outs = run(
            ctx,
            {T: T_},
            tpo.eval_symbol(t),
            tpo.eval_symbol(T - t),
            tpo.eval_symbol(t * 2 + 1),
            tpo.eval_symbol(t // 2),
            tpo.eval_symbol(t % 3),
        )
    u = np.arange(T_)
    for got, want in zip(outs, [u, T_ - u, 2 * u + 1, u // 2, u % 3]):
        check_int(got, want)
        assert got.dtype == np.int64


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_eval_symbol_discounted_returns(T_):
    """Discounting with gamma ** eval_symbol(t): total return and per-step returns."""
    x = data(30, T_)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        disc = 0.9 ** tpo.eval_symbol(t)
        total = (r * disc)[0:T].sum()
        g = (r * disc)[t:T].sum() / disc
        a, b, c = run(ctx, {T: T_}, total, g, disc)
    u = np.arange(T_)
    check(a, discounted(x, 0.9))
    check(b, [discounted(x[k:], 0.9) for k in range(T_)])
    check(c, 0.9**u)


@pytest.mark.parametrize("I_,T_", [(1, 4), (3, 5)])
def test_eval_symbol_learning_rate_schedule(I_, T_):
    """Learning-rate schedule 1e-3 * 0.99 ** eval_symbol(i) times an RT over t: domain (i, t)."""
    x = data(31, T_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(t,))
        lr = 1e-3 * 0.99 ** tpo.eval_symbol(i)
        y = lr * r
        a, b = run(ctx, {I: I_, T: T_}, lr, y)
    lr_np = 1e-3 * 0.99 ** np.arange(I_)
    check(a, lr_np)
    check(b, lr_np[:, None] * x[None, :])


# --------------------------------------------------------------------------
# two temporal dims (i, t)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("I_,T_", [(1, 1), (3, 5), (2, 8)])
def test_domain_union(I_, T_):
    """Domain unioning: RT over (t,) with RT over (i,) gives one over (i, t)."""
    x = data(32, T_)
    y = data(33, I_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        a = tpo.from_numpy(x, dims=(t,))
        b = tpo.from_numpy(y, dims=(i,))
        s = a + b
        p = b * a
        assert len(s.domain) == 2
        out_s, out_p = run(ctx, {I: I_, T: T_}, s, p)
    check(out_s, y[:, None] + x[None, :])
    check(out_p, y[:, None] * x[None, :])


@pytest.mark.parametrize("I_,T_", [(1, 1), (3, 5), (2, 8)])
def test_two_dims_prefix_sum_over_t(I_, T_):
    """Multi-dim keys s[i, 0], s[i, t+1]: per-iteration prefix sums over t."""
    x = data(34, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(i, t))
        s = ph(dims=(i, t))
        s[i, 0] = r[i, 0]
        s[i, t + 1] = s[i, t] + r[i, t + 1]
        (a,) = run(ctx, {I: I_, T: T_}, s)
    check(a, np.cumsum(x, axis=1))


@pytest.mark.parametrize("I_,T_", [(1, 1), (3, 5), (4, 2)])
def test_two_dims_recurrence_over_i(I_, T_):
    """Multi-dim keys s[0, t], s[i+1, t]: recurrence over the outer dim i."""
    x = data(35, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(i, t))
        s = ph(dims=(i, t))
        s[0, t] = r[0, t]
        s[i + 1, t] = 0.5 * s[i, t] + r[i + 1, t]
        (a,) = run(ctx, {I: I_, T: T_}, s)
    expected = np.zeros((I_, T_))
    expected[0] = x[0]
    for k in range(1, I_):
        expected[k] = 0.5 * expected[k - 1] + x[k]
    check(a, expected)


@pytest.mark.parametrize("I_,T_", [(1, 1), (3, 5), (2, 8)])
def test_two_dims_reduce_over_slices(I_, T_):
    """Slices of one dim in a two-dim RT: x[0:I, t].mean(), x[i, 0:T].sum(), x[i, 0:t+1].sum(), x[0:I, 0:T].max()."""
    x = data(36, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(i, t))
        over_i = r[0:I, t].mean()
        over_t = r[i, 0:T].sum()
        causal = r[i, 0:t + 1].sum()
        both = r[0:I, 0:T].max()
        a, b, c, d = run(ctx, {I: I_, T: T_}, over_i, over_t, causal, both)
    check(a, x.mean(axis=0))
    check(b, x.sum(axis=1))
    check(c, np.cumsum(x, axis=1))
    check(d, x.max())


@pytest.mark.parametrize("I_,T_", [(1, 4), (4, 6)])
def test_two_dims_sgd_linear_regression(I_, T_):
    """Parameter recurrence over i (w[0], w[i+1]) with a gradient from x[i, 0:T] and lr 0.1 * 0.99 ** i."""
    D = 3
    X = data(37, I_, T_, D)
    Y = data(38, I_, T_)
    w0 = data(39, D)
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        Xr = tpo.from_numpy(X, dims=(i, t))
        Yr = tpo.from_numpy(Y, dims=(i, t))
        w = ph(shape=(D,), dims=(i,))
        w[0] = tpo.from_numpy(w0, dims=())
        Xs = Xr[i, 0:T]
        err = Xs @ w[i] - Yr[i, 0:T]
        grad = (err.unsqueeze(1) * Xs).mean(axis=0)
        lr = 0.1 * 0.99 ** tpo.eval_symbol(i)
        w[i + 1] = w[i] - lr * grad
        out_w, out_g, out_e = run(ctx, {I: I_, T: T_}, w, grad, err)
    ws, gs, es = [], [], []
    wv = w0.copy()
    for k in range(I_):
        ws.append(wv)
        e = X[k] @ wv - Y[k]
        gk = (e[:, None] * X[k]).mean(axis=0)
        es.append(e)
        gs.append(gk)
        wv = wv - 0.1 * 0.99**k * gk
    check(out_w, np.stack(ws))
    check(out_g, np.stack(gs))
    check(out_e, np.stack(es))


# --------------------------------------------------------------------------
# three temporal dims (b, i, t)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("B_,I_,T_", [(1, 1, 1), (2, 3, 5), (3, 2, 4)])
def test_three_dims_mean_over_batch_and_time(B_, I_, T_):
    """Three dims: x[0:B, i, 0:T].mean() gives one value per iteration."""
    x = data(40, B_, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        r = tpo.from_numpy(x, dims=(b, i, t))
        loss = r[0:B, i, 0:T].mean()
        per_bt = r[b, i, 0:T].sum()
        (a, c) = run(ctx, {B: B_, I: I_, T: T_}, loss, per_bt)
    check(a, x.mean(axis=(0, 2)))
    check(c, x.sum(axis=2))


@pytest.mark.parametrize("B_,I_,T_", [(1, 1, 1), (2, 3, 5), (3, 2, 6)])
def test_three_dims_reinforce_loss(B_, I_, T_):
    """Three dims: g = r[b, i, t:T].discounted_sum(0.95); loss = -(lp * g)[0:B, i, 0:T].mean()."""
    rw = data(41, B_, I_, T_)
    lp = data(42, B_, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        r = tpo.from_numpy(rw, dims=(b, i, t))
        logp = tpo.from_numpy(lp, dims=(b, i, t))
        g = r[b, i, t:T].discounted_sum(0.95)
        loss = -(logp * g)[0:B, i, 0:T].mean()
        out_g, out_l = run(ctx, {B: B_, I: I_, T: T_}, g, loss)
    eg = np.zeros((B_, I_, T_))
    for bb in range(B_):
        for k in range(I_):
            for u in range(T_):
                eg[bb, k, u] = discounted(rw[bb, k, u:], 0.95)
    check(out_g, eg)
    check(out_l, -(lp * eg).mean(axis=(0, 2)))


@pytest.mark.parametrize("B_,I_,T_", [(1, 1, 1), (2, 2, 5)])
def test_three_dims_window_and_recurrence(B_, I_, T_):
    """Three dims: backward window r[b, i, max(0,t-1):t+1] and recurrence s[b, i, t+1]."""
    x = data(43, B_, I_, T_)
    ctx = tpo.Context()
    with ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        r = tpo.from_numpy(x, dims=(b, i, t))
        win = r[b, i, tpo.max(0, t - 1):t + 1].sum()
        s = ph(dims=(b, i, t))
        s[b, i, 0] = r[b, i, 0]
        s[b, i, t + 1] = 0.9 * s[b, i, t] + r[b, i, t + 1]
        out_w, out_s = run(ctx, {B: B_, I: I_, T: T_}, win, s)
    ew = np.zeros_like(x)
    es = np.zeros_like(x)
    for u in range(T_):
        ew[..., u] = x[..., max(0, u - 1): u + 1].sum(axis=-1)
        es[..., u] = x[..., u] if u == 0 else 0.9 * es[..., u - 1] + x[..., u]
    check(out_w, ew)
    check(out_s, es)


# --------------------------------------------------------------------------
# dynamic-size reductions, matmul over dynamic axes
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5, 8])
def test_dynamic_reductions_several_axes(T_):
    """Reductions over several axes including the dynamic one: x[0:t+1] of (3, 4) matrices."""
    x = data(44, T_, 3, 4)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        past = r[0:t + 1]
        fut = r[t:T]
        outs = run(
            ctx,
            {T: T_},
            past.sum(axis=(0, 2)),
            fut.mean(),
            past.max(axis=0, keepdims=True),
            fut.min(axis=(0, 1)),
            past.mean(axis=2).sum(axis=0),
        )
    check(outs[0], np.stack([x[: u + 1].sum(axis=(0, 2)) for u in range(T_)]))
    check(outs[1], np.array([x[u:].mean() for u in range(T_)]))
    check(outs[2], np.stack([x[: u + 1].max(axis=0, keepdims=True) for u in range(T_)]))
    check(outs[3], np.stack([x[u:].min(axis=(0, 1)) for u in range(T_)]))
    check(outs[4], np.stack([x[: u + 1].mean(axis=2).sum(axis=0) for u in range(T_)]))


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_causal_attention(T_):
    """Causal attention: softmax(q[t] @ k[0:t+1]^T / sqrt(D)) @ v[0:t+1]."""
    D = 4
    q = data(45, T_, D)
    k = data(46, T_, D)
    v = data(47, T_, D)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        qr = tpo.from_numpy(q, dims=(t,))
        kr = tpo.from_numpy(k, dims=(t,))
        vr = tpo.from_numpy(v, dims=(t,))
        scores = (qr[t] @ kr[0:t + 1].permute(1, 0)) * (1.0 / np.sqrt(D))
        e = (scores - scores.max()).exp()
        weights = e / e.sum()
        out = weights @ vr[0:t + 1]
        (a,) = run(ctx, {T: T_}, out)
    expected = np.zeros((T_, D))
    for u in range(T_):
        s = q[u] @ k[: u + 1].T / np.sqrt(D)
        ex = np.exp(s - s.max())
        expected[u] = (ex / ex.sum()) @ v[: u + 1]
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_window_attention(T_):
    """Window attention over k[max(0, t-w+1):t+1] (w = 3) with matmul on the dynamic axis."""
    D, w = 3, 3
    q = data(48, T_, D)
    k = data(49, T_, D)
    v = data(50, T_, D)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        qr = tpo.from_numpy(q, dims=(t,))
        kr = tpo.from_numpy(k, dims=(t,))
        vr = tpo.from_numpy(v, dims=(t,))
        lo = tpo.max(0, t - w + 1)
        scores = qr @ kr[lo:t + 1].permute(1, 0)
        e = scores.exp()
        out = (e @ vr[lo:t + 1]) / e.sum()
        (a,) = run(ctx, {T: T_}, out)
    expected = np.zeros((T_, D))
    for u in range(T_):
        lo_ = max(0, u - w + 1)
        ex = np.exp(q[u] @ k[lo_: u + 1].T)
        expected[u] = (ex @ v[lo_: u + 1]) / ex.sum()
    check(a, expected)


@pytest.mark.parametrize("T_", [1, 5, 8])
def test_gram_matrix_over_dynamic_axis(T_):
    """Matmul contracting a dynamic axis: x[0:t+1]^T @ x[0:t+1] (running Gram matrix)."""
    D = 3
    x = data(51, T_, D)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        past = r[0:t + 1]
        gram = past.permute(1, 0) @ past
        gram2 = past.permute(1, 0).matmul(past)
        a, b = run(ctx, {T: T_}, gram, gram2)
    expected = np.stack([x[: u + 1].T @ x[: u + 1] for u in range(T_)])
    check(a, expected)
    check(b, expected)


# --------------------------------------------------------------------------
# spatial operations per timestep, elementwise math, constructors
# --------------------------------------------------------------------------
@pytest.mark.parametrize("T_", [1, 5])
def test_spatial_ops_per_step(T_):
    """Matrices per step: matmul, reshape, permute, expand, (un)squeeze, cat, spatial indexing."""
    m = data(52, T_, 2, 3)
    n = data(53, T_, 3, 4)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        mr = tpo.from_numpy(m, dims=(t,))
        nr = tpo.from_numpy(n, dims=(t,))
        prod = mr @ nr
        resh = mr.reshape(3, 2)
        perm = mr.permute(1, 0)
        expd = mr.unsqueeze(0).expand(4, 2, 3)
        sq = mr.unsqueeze(1).squeeze(1)
        cat0 = tpo.cat([mr, mr * 2.0], axis=0)
        cat1 = tpo.cat([mr, nr.spatial[0:2]], axis=1)
        row = mr.spatial[1]
        cols = mr.spatial[:, 0:2]
        assert tuple(prod.shape) == (2, 4)
        outs = run(ctx, {T: T_}, prod, resh, perm, expd, sq, cat0, cat1, row, cols)
    check(outs[0], m @ n)
    check(outs[1], m.reshape(T_, 3, 2))
    check(outs[2], m.transpose(0, 2, 1))
    check(outs[3], np.broadcast_to(m[:, None], (T_, 4, 2, 3)))
    check(outs[4], m)
    check(outs[5], np.concatenate([m, m * 2.0], axis=1))
    check(outs[6], np.concatenate([m, n[:, 0:2]], axis=2))
    check(outs[7], m[:, 1])
    check(outs[8], m[:, :, 0:2])


@pytest.mark.parametrize("T_", [1, 6])
def test_elementwise_math(T_):
    """Elementwise math on RTs: arithmetic, unary functions, comparisons, where, min/max."""
    x = data(54, T_, 3)
    p = positive(55, T_, 3)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        xr = tpo.from_numpy(x, dims=(t,))
        pr = tpo.from_numpy(p, dims=(t,))
        exprs = [
            xr + pr, xr - pr, xr * pr, xr / pr, pr ** 1.5, -xr, 2.0 - xr, 1.0 / pr,
            xr.exp(), pr.log(), pr.sqrt(), xr.abs(), xr.tanh(), xr.sigmoid(), xr.relu(),
            tpo.exp(xr), tpo.log(pr), tpo.sqrt(pr), tpo.abs(xr), tpo.tanh(xr),
            tpo.where(xr > 0, xr, 0.1 * xr), tpo.max(xr, pr - 1.0), tpo.min(xr, pr - 1.0),
        ]
        cmps = [xr < 0.0, xr <= pr, xr > pr - 1.0, xr >= 0.0, xr == xr]
        outs = run(ctx, {T: T_}, *exprs, *cmps)
    sig = 1.0 / (1.0 + np.exp(-x))
    expected = [
        x + p, x - p, x * p, x / p, p**1.5, -x, 2.0 - x, 1.0 / p,
        np.exp(x), np.log(p), np.sqrt(p), np.abs(x), np.tanh(x), sig, np.maximum(x, 0.0),
        np.exp(x), np.log(p), np.sqrt(p), np.abs(x), np.tanh(x),
        np.where(x > 0, x, 0.1 * x), np.maximum(x, p - 1.0), np.minimum(x, p - 1.0),
    ]
    for got, want in zip(outs[: len(exprs)], expected):
        check(got, want)
    want_cmps = [x < 0.0, x <= p, x > p - 1.0, x >= 0.0, x == x]
    for got, want in zip(outs[len(exprs):], want_cmps):
        assert got.dtype == np.bool_, got.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("T_", [1, 5])
def test_constructors_cast_and_plain_tensors(T_):
    """full / zeros / ones, plain (dims=()) tensors, cast of eval_symbol to float64."""
    x = data(56, T_, 2)
    M = data(57, 2, 2)
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        r = tpo.from_numpy(x, dims=(t,))
        Mr = tpo.from_numpy(M, dims=())
        y = r + tpo.full((2,), 3.0, dtype="float64") * tpo.ones((2,), dtype="float64")
        z = tpo.zeros((2,), dtype="float64") + r @ Mr
        half = tpo.eval_symbol(t).cast("float64") / 2.0
        gram = Mr @ Mr.permute(1, 0)
        outs = run(ctx, {T: T_}, y, z, half, gram)
        assert outs[2].dtype == np.float64
        assert str(half.dtype).endswith("float64")
    check(outs[0], x + 3.0)
    check(outs[1], x @ M)
    check(outs[2], np.arange(T_) / 2.0)
    check(outs[3], M @ M.T)
