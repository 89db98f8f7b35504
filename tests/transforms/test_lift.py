"""The lifting pass: reductions over growing slices become scans; results equal the unlifted program."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.ir import ops

X = np.random.default_rng(0).normal(size=(3, 7, 2))


def compiled(build, lift: bool):
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(X, dims=(i, t))
        fetch = build(x, i, t, T)
        passes = {"fuse": False} if lift else {"fuse": False, "lift": False}
        program = ctx.compile(fetch, passes=passes)
    return program, program.run({I: 3, T: 7})


def test_prefix_suffix_and_discounted_sums_become_scans():
    def build(x, i, t, T):
        return [x[i, 0:t + 1].sum(axis=0), x[i, t:T].sum(axis=0), x[i, t:T].discounted_sum(0.9),
                x[i, 0:t + 1].sum()]

    (lifted, got), (plain, want) = compiled(build, True), compiled(build, False)
    np.testing.assert_allclose(got[0], np.cumsum(X, axis=1), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.cumsum(X[:, ::-1], axis=1)[:, ::-1], rtol=1e-12)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    scans = [n for n in lifted.sdg.nodes.values() if isinstance(n.op, ops.ScanOp)]
    np.testing.assert_allclose(got[3], np.cumsum(X, axis=1).sum(-1), rtol=1e-12)
    assert len(scans) == 4 and not any(isinstance(n.op, ops.ScanOp) for n in plain.sdg.nodes.values())
    assert all(n.domain == () for n in scans)           # i is vectorized; t is gone: one launch each


def test_a_constant_width_window_is_one_stencil():
    def build(x, i, t, T):
        return [x[i, tpo.max(0, t - 2):t + 1].sum(axis=0)]

    (lifted, got), (_, want) = compiled(build, True), compiled(build, False)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    padded = np.concatenate([np.zeros((3, 2, 2)), X], axis=1)
    np.testing.assert_allclose(got[0], padded[:, 2:] + padded[:, 1:-1] + padded[:, :-2], rtol=1e-12)
    scans = [n.op for n in lifted.sdg.nodes.values() if isinstance(n.op, ops.ScanOp)]
    assert [op.window for op in scans] == [3]


def test_means_over_prefix_suffix_and_window_slices_are_scans_divided_by_the_length():
    def build(x, i, t, T):
        return [x[i, 0:t + 1].mean(axis=0), x[i, t:T].mean(), x[i, tpo.max(0, t - 2):t + 1].mean(axis=0)]

    (lifted, got), (_, want) = compiled(build, True), compiled(build, False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    counts = np.arange(1, 8)
    np.testing.assert_allclose(got[0], np.cumsum(X, axis=1) / counts[None, :, None], rtol=1e-12)
    np.testing.assert_allclose(got[1], np.cumsum(X[:, ::-1].sum(-1), axis=1)[:, ::-1] / (2 * counts[::-1]),
                               rtol=1e-12)
    assert [n.op.window for n in lifted.sdg.nodes.values() if isinstance(n.op, ops.ScanOp)] == [0, 0, 3]
    assert not any(isinstance(n.op, ops.ReduceOp) and n.op.fn == "mean" and 0 in n.op.axes and "t" in str(n.domain)
                   for n in lifted.sdg.nodes.values())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["prefix", "suffix", "discounted", "window", "prefix_mean", "window_mean"]),
                          st.floats(0.1, 1.0)), min_size=1, max_size=4))
def test_random_slice_reductions_match_the_unlifted_program(reads):
    def build(x, i, t, T):
        out = []
        for kind, gamma in reads:
            if kind == "prefix":
                out.append(x[i, 0:t + 1].sum() * gamma)
            elif kind == "suffix":
                out.append((x[i, t:T] * gamma).sum())
            elif kind == "discounted":
                out.append(x[i, t:T].discounted_sum(gamma))
            elif kind == "prefix_mean":
                out.append(x[i, 0:t + 1].mean(axis=0) * gamma)
            elif kind == "window_mean":
                out.append(x[i, tpo.max(0, t - 2):t + 1].mean())
            else:
                out.append(x[i, tpo.max(0, t - 1):t + 1].sum())
        return out

    (_, got), (_, want) = compiled(build, True), compiled(build, False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_gae_becomes_a_linear_scan():
    rng = np.random.default_rng(1)
    reward = rng.normal(size=(3, 6)).astype(np.float32)
    value = rng.normal(size=(3, 6)).astype(np.float32)
    done = rng.uniform(size=(3, 6)) < 0.2
    outs = []
    for passes in ({"fuse": False}, {"fuse": False, "lift": False}):
        with tpo.Context() as ctx:
            (b, B), (t, T) = ctx.dims("b", "t")
            r, v = tpo.from_numpy(reward, dims=(b, t)), tpo.from_numpy(value, dims=(b, t))
            d = tpo.from_numpy(done, dims=(b, t))
            adv, ret = tpo.rl.gae(r, v, d, 0.99, 0.95)
            program = ctx.compile([adv, ret], passes=passes)
            outs.append((program, program.run({B: 3, T: 6})))
    (lifted, got), (plain, want) = outs
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert any(isinstance(n.op, ops.LinearScanOp) for n in lifted.sdg.nodes.values())
    assert not any(isinstance(n.op, ops.LinearScanOp) for n in plain.sdg.nodes.values())


def test_shifted_placeholders_become_one_concatenation():
    """GAE's next value (``v[t + 1]``, 0 at the end) and the alive mask (1 at the start, then
    ``1 - done[t - 1]``) are each one cat of the shifted whole tensor and the fill."""
    rng = np.random.default_rng(2)
    value = rng.normal(size=(3, 6)).astype(np.float32)
    done = rng.uniform(size=(3, 6)) < 0.3
    outs = []
    for passes in ({"fuse": False}, {"fuse": False, "lift": False}):
        with tpo.Context() as ctx:
            (b, B), (t, T) = ctx.dims("b", "t")
            v, d = tpo.from_numpy(value, dims=(b, t)), tpo.from_numpy(done, dims=(b, t))
            nxt = tpo.placeholder((), "float32", dims=(b, t))
            nxt[t < T - 1] = v[b, t + 1]
            nxt[t >= T - 1] = 0.0
            program = ctx.compile([nxt, tpo.rl.alive(d)], passes=passes)
            outs.append((program, program.run({B: 3, T: 6})))
    (lifted, got), (plain, want) = outs
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(got[0], np.concatenate([value[:, 1:], np.zeros((3, 1), np.float32)], axis=1))
    assert "CatOp" in str(lifted.sdg) and "CatOp" not in str(plain.sdg)


def test_a_reduction_inside_its_own_recurrence_is_not_lifted():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float64", dims=(t,))
        s[0] = tpo.from_numpy(np.float64(1.0))
        s[t + 1] = s[0:t + 1].sum() * 0.5           # each step reads every earlier one
        program = ctx.compile([s], passes={"fuse": False})
        (got,) = program.run({T: 6})
    np.testing.assert_allclose(got, [1.0, 0.5, 0.75, 1.125, 1.6875, 2.53125])
    assert "ScanOp" not in str(program.sdg)
