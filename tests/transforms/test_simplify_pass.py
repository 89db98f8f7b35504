"""Algebraic simplification: each rule fires on a small program, which computes what it did."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api.rt import apply
from tempo.errors import TempoError
from tempo.ir import ops
from tempo.symbolic.expr import Expr
from tempo.transforms import simplify
from tests.transforms.simplification import compiled, ops_of, same_results

XS = np.random.default_rng(0).standard_normal((10, 2, 3))
A = np.random.default_rng(1).standard_normal((32, 16))
V = np.random.default_rng(2).standard_normal((10, 16))
U = np.random.default_rng(3).standard_normal((10, 8))
ON = {"lift": False, "vectorize": False, "fuse": False}  # the structure as the simplification passes leave it
OFF = {**ON, "simplify": False}


def both(build, bounds, cfg=simplify.Config(), exact=True):
    """``build`` compiled with simplification (``cfg``) and without; the results must agree."""
    (fast, got), (slow, want) = compiled(build, {**ON, "simplify": cfg}, bounds), compiled(build, OFF, bounds)
    same_results(got, want, exact)
    return fast, slow, got


def fired(build, cfg=simplify.Config()):
    """Which rules fire on ``build``'s program (as built)."""
    with tpo.Context() as ctx:
        fetch = build(ctx)
        roots = tuple(x.node.id for x in fetch)
        return simplify.rewrite(replace(ctx.sdg, roots=roots), cfg)[1]


def x_over_t(ctx):
    (t, T), = ctx.dims("t")
    return tpo.from_numpy(XS, dims=(t,)), t, T


def elementwise(program, fn: str) -> list:
    return [n for n in ops_of(program, ops.ElementwiseOp) if n.op.fn == fn]


def test_identities_leave_the_input_itself():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        return [(-(-((x * 1.0 + 0.0) - 0.0) / 1.0)).tanh(), 1.0 * x]

    fast, slow, (y, x) = both(build, {"T": 10})
    np.testing.assert_array_equal(y, np.tanh(XS))
    np.testing.assert_array_equal(x, XS)
    assert [n.op.fn for n in ops_of(fast, ops.ElementwiseOp)] == ["tanh"]
    assert fast.fetch[1] == (fast.sdg.nodes[fast.fetch[1][0]].id, 0)
    assert isinstance(fast.sdg.nodes[fast.fetch[1][0]].op, ops.ConstOp)  # the fetch reads x itself
    assert set(fired(build)) == {"x * 1", "1 * x", "x + 0", "x - 0", "x / 1", "--x"}


def test_a_rule_that_would_change_a_shape_or_dtype_is_not_applied():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        scalar = x.sum()
        ints = tpo.eval_symbol(ctx.dim_order[0])
        return [scalar * tpo.ones((4,), "float64"), ints * 1.0, (x * 1.0).cast("float32")]

    fast, _, (spread, floats, _) = both(build, {"T": 10})
    np.testing.assert_array_equal(spread, np.repeat(XS.sum(axis=(1, 2))[:, None], 4, axis=1))
    assert floats.dtype == np.float64 and floats.tolist() == list(range(10))  # int64 * 1.0 is a float
    assert len(elementwise(fast, "mul")) == 2


def test_view_chains_cancel():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        y = x.reshape(3, 2).reshape(6).reshape(2, 3)          # reshape chain to the same shape
        y = y.unsqueeze(0).squeeze(0).permute(1, 0).permute(1, 0)
        y = y.expand(2, 3).unsqueeze(1).sum(axis=1).ident()   # expand to its shape, sum over size 1
        y = apply(ops.CastOp("float64"), [y])                 # a cast to its own dtype
        y = tpo.cat([y.spatial[0:2, 0:3]], axis=0)            # the whole of each axis, a cat of one
        return [y.exp()]

    fast, slow, (y,) = both(build, {"T": 10})
    np.testing.assert_array_equal(y, np.exp(XS))
    views = (ops.ReshapeOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp, ops.UnsqueezeOp, ops.ReduceOp,
             ops.IdentOp, ops.CastOp, ops.SpatialIndexOp, ops.CatOp)
    assert not any(ops_of(fast, v) for v in views)
    assert len(fast.sdg.nodes) == 2 and len(slow.sdg.nodes) >= 14


def test_a_bypassed_node_is_read_through_both_dependence_expressions():
    def build(ctx):
        x, t, T = x_over_t(ctx)
        y = x * 1.0
        ahead = x[t + 1] * 1.0                   # defined for t < T - 1
        lagged = x[tpo.max(t - 1, 0)] * 1.0     # read below at t:T: no single index composes
        sums = tpo.placeholder((2, 3), "float64", dims=(t,))
        sums[t < T - 1] = ahead[0:t + 1].sum(axis=0)
        sums[t >= T - 1] = x * 0.0
        return [y[t:T].sum(axis=0), lagged[t:T].sum(axis=0), y[0:t + 1].mean(axis=0), sums]

    fast, _, (future, lagged, past, sums) = both(build, {"T": 10})
    np.testing.assert_allclose(future, XS[::-1].cumsum(axis=0)[::-1], rtol=1e-12)
    np.testing.assert_allclose(lagged[1:], np.concatenate([XS[:1], XS[:-1]])[::-1].cumsum(axis=0)[::-1][1:],
                               rtol=1e-12)
    np.testing.assert_allclose(past, XS.cumsum(axis=0) / np.arange(1, 11)[:, None, None], rtol=1e-12)
    np.testing.assert_allclose(sums[:-1], XS[1:].cumsum(axis=0), rtol=1e-12)
    reads = {str(e.index) for e in fast.sdg.edges if isinstance(fast.sdg.nodes[e.src].op, ops.ConstOp)}
    assert {"[t:T]", "[0:t + 1]", "[1:t + 2]"} <= reads
    assert len(elementwise(fast, "mul")) == 2  # the lagged product, and x * 0.0


def test_fast_math_rules_only_when_asked():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        return [x.exp().log() + (x - x), (x.abs() + 1.0).log().exp()]

    assert set(fired(build)).isdisjoint({"log(exp x)", "exp(log x)", "x - x"})
    fast_math = simplify.Config(fast_math=True)
    assert {"log(exp x)", "exp(log x)", "x - x"} <= set(fired(build, fast_math))
    fast, slow, (y, z) = both(build, {"T": 10}, fast_math, exact=False)
    np.testing.assert_allclose(y, XS, rtol=1e-12)
    assert not elementwise(fast, "log") and not elementwise(fast, "exp")


def test_rules_are_switched_off_by_name():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        return [(x * 1.0).tanh()]

    assert not fired(build, simplify.Config(skip=frozenset({"x * 1"})))
    with pytest.raises(TempoError, match="names x \\* 2, not a rule"):
        fired(build, simplify.Config(skip=frozenset({"x * 2"})))


def test_an_expand_an_elementwise_op_broadcasts_anyway_is_removed():
    def build(ctx):
        x, _, _ = x_over_t(ctx)
        row = tpo.from_numpy(np.array([1.0, 2.0, 3.0]))
        return [x * row.expand(2, 3) + tpo.full((2, 3), 0.5, "float64")]

    fast, slow, (y,) = both(build, {"T": 10})
    np.testing.assert_array_equal(y, XS * [1.0, 2.0, 3.0] + 0.5)
    assert not ops_of(fast, ops.ExpandOp) and len(ops_of(slow, ops.ExpandOp)) == 2
    assert fired(build)["broadcast removal"] == 2


def test_a_matmul_chain_is_reassociated_when_the_other_way_is_always_cheaper():
    w, v = np.random.default_rng(4).standard_normal((3, 8)), np.random.default_rng(5).standard_normal((8, 1))

    def build(ctx):
        x, _, _ = x_over_t(ctx)               # (2, 3) at every t
        return [(x @ tpo.from_numpy(w)) @ tpo.from_numpy(v)]

    fast, slow, (y,) = both(build, {"T": 10}, exact=False)
    np.testing.assert_allclose(y, XS @ (w @ v), rtol=1e-12)
    inner = [n for n in ops_of(fast, ops.MatMulOp) if not n.domain]
    assert len(inner) == 1 and inner[0].shapes == ((3, 1),)  # w @ v, computed once for every t


def chain_over_window(ctx):
    """TEMPO §4.1's example: A (32, 16), B (16, t + 1), C (t + 1, 8); (A B) C costs 768 (t + 1)
    multiply-adds, A (B C) 128 (t + 1) + 4096: cheaper from t = 6 on."""
    (t, T), = ctx.dims("t")
    a = tpo.from_numpy(A)
    b = tpo.from_numpy(V, dims=(t,))[0:t + 1].permute(1, 0)
    c = tpo.from_numpy(U, dims=(t,))[0:t + 1]
    return [(a @ b) @ c]


def test_a_matmul_chain_whose_cheaper_association_depends_on_the_step_picks_it_per_point():
    fast, slow, (y,) = both(chain_over_window, {"T": 10}, exact=False)
    want = [A @ V[:k + 1].T @ U[:k + 1] for k in range(10)]
    np.testing.assert_allclose(y, np.array(want), rtol=1e-10)
    (choice,) = ops_of(fast, ops.MergeOp)
    (first, second) = sorted((e for e in fast.sdg.edges if e.sink == choice.id), key=lambda e: e.sink_in)
    assert isinstance(first.cond, Expr) and str(first.cond) == "t <= 5" and second.cond is None
    assert len(ops_of(fast, ops.MatMulOp)) == 4 and len(ops_of(slow, ops.MatMulOp)) == 2


def test_a_matmul_chain_whose_cheaper_association_depends_on_a_bound_picks_it_per_run():
    def build(ctx):
        (t, T), = ctx.dims("t")
        b = tpo.from_numpy(V, dims=(t,))[0:T].permute(1, 0)
        c = tpo.from_numpy(U, dims=(t,))[0:T]
        return [(tpo.from_numpy(A) @ b) @ c]

    for bound in (4, 10):  # A (B C) is cheaper from T = 7 on
        fast, _, (y,) = both(build, {"T": bound}, exact=False)
        np.testing.assert_allclose(y, A @ V[:bound].T @ U[:bound], rtol=1e-10)
    (choice,) = ops_of(fast, ops.MergeOp)
    assert str(next(e.cond for e in fast.sdg.edges if e.sink == choice.id and e.cond is not None)) == "T <= 6"


# ----- random programs -----
STEPS = ["one", "zero", "neg2", "tanh", "reshape", "unsqueeze", "sum1", "permute", "expand", "ident",
         "cast", "add", "lag", "window", "matmul"]
W = np.random.default_rng(6).standard_normal((3, 3)) * 0.5


def random_program(spec):
    def build(ctx):
        x, t, T = x_over_t(ctx)
        values = [x]
        for kind, a, b in spec:
            v, other = values[a % len(values)], values[b % len(values)]
            shape = tuple(v.shape)
            if kind == "one":
                v = v * 1.0
            elif kind == "zero":
                v = 0.0 + v
            elif kind == "neg2":
                v = -(-v)
            elif kind == "tanh":
                v = v.tanh()
            elif kind == "reshape":
                v = v.reshape(-1).reshape(*shape)
            elif kind == "unsqueeze":
                v = v.unsqueeze(0).squeeze(0)
            elif kind == "sum1":
                v = v.unsqueeze(-1).sum(axis=-1)
            elif kind == "permute" and len(shape) == 2:
                v = v.permute(1, 0).permute(1, 0)
            elif kind == "expand":
                v = v.expand(*shape)
            elif kind == "ident":
                v = v.ident()
            elif kind == "cast":
                v = apply(ops.CastOp(v.dtype), [v])
            elif kind == "add" and tuple(other.shape) == shape:
                v = v + other
            elif kind == "lag":
                v = v[tpo.max(t - 1, 0)] * 1.0
            elif kind == "window":
                v = v[0:t + 1].sum(axis=0)
            elif kind == "matmul" and shape and shape[-1] == 3:
                v = (v @ tpo.from_numpy(W)) @ tpo.from_numpy(W.T)
            values.append(v)
        return values[1:]

    return build


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=8))
def test_random_programs_compute_the_same_simplified(spec):
    build = random_program(spec)
    fast, slow, _ = both(build, {"T": 4}, exact=False)
    assert len(fast.sdg.nodes) <= len(slow.sdg.nodes)


def test_a_merge_of_one_branch_goes_unless_it_is_the_only_merge_on_a_cycle():
    def gradient_like(ctx):
        x, _, _ = x_over_t(ctx)
        g = tpo.placeholder((2, 3), "float64", dims=ctx.dim_order)
        g[ctx.dim_order[0]] = x * 3.0                 # one branch, always taken
        return [g.exp()]

    fast, _, (y,) = both(gradient_like, {"T": 10})
    np.testing.assert_allclose(y, np.exp(3.0 * XS), rtol=1e-12)
    assert not ops_of(fast, ops.MergeOp)
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        a, b = (tpo.placeholder((), "float64", dims=(t,)) for _ in range(2))
        a[t] = b[t] + 1.0
        b[t] = a[t] * 2.0
        with pytest.raises(tpo.ScheduleError, match="cycle"):
            ctx.run(bounds={T: 3}, fetch=[a])
