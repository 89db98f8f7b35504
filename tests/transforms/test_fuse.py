"""The fuse pass: static islands become FusedOps; programs compute what they computed unfused."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir.ops import FusedOp
from tempo.schedule import isl_domains
from tempo.transforms import fuse

W = np.random.default_rng(0).standard_normal((3, 3)) * 0.5
XS = np.random.default_rng(1).standard_normal((6, 3))


def run_both(build, bounds):
    """``build(ctx) -> (fetch, bounds)``, compiled and run with and without fusion."""
    out = []
    for passes in ({}, {"fuse": False}):
        with tpo.Context(seed=3) as ctx:
            fetch, named = build(ctx)
            program = ctx.compile(fetch, passes=passes)
            out.append((program, program.run(named(bounds))))
    return out


def islands(program) -> list:
    return [node for node in program.sdg.nodes.values() if isinstance(node.op, FusedOp)]


def rnn(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS, dims=(t,))
    w = tpo.from_numpy(W)
    h = tpo.placeholder((3,), "float64", dims=(t,))
    h[0] = x[0].tanh()
    h[t + 1] = ((w @ h[t]) + x[t + 1]).tanh()
    y = (h * 2.0).sum()
    return [h, y], lambda b: {T: b["T"]}


def test_a_recurrence_body_fuses_and_computes_the_numpy_loop():
    (fused, (h, y)), (plain, (h0, y0)) = run_both(rnn, {"T": 6})
    want = [np.tanh(XS[0])]
    for k in range(1, 6):
        want.append(np.tanh(W @ want[-1] + XS[k]))
    np.testing.assert_allclose(h, np.array(want), rtol=1e-12)
    np.testing.assert_allclose(y, 2.0 * np.array(want).sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(h, h0)
    np.testing.assert_array_equal(y, y0)
    body = max(islands(fused), key=lambda n: len(n.op.steps))
    names = [step.op.name for step in body.op.steps]
    assert "MatMulOp" in names and names.count("ElementwiseOp") >= 2
    assert len(fused.sdg.nodes) < len(plain.sdg.nodes)
    assert not islands(plain)


def returns(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS[:, 0], dims=(t,))
    r = x * x + 1.0
    g = r[t:T].sum()
    y = (g * r).exp()
    return [r, g, y], lambda b: {T: b["T"]}


def test_a_path_through_a_future_slice_keeps_its_ends_apart():
    (fused, (r, g, y)), (_, want) = run_both(returns, {"T": 6})
    for got, expected in zip((r, g, y), want):
        np.testing.assert_array_equal(got, expected)
    x = XS[:, 0]
    np.testing.assert_allclose(g, [(x[k:] ** 2 + 1).sum() for k in range(6)], rtol=1e-12)
    with tpo.Context() as ctx:  # per point of t (vectorized, the whole program is one island over no dim)
        (r_rt, _, y_rt), _ = returns(ctx)
        program = ctx.compile([r_rt, y_rt], passes={"vectorize": False})
    sdg = program.sdg
    assert sdg.resolve(r_rt.node.id)[0] != sdg.resolve(y_rt.node.id)[0]


def test_the_decision_is_checked_path_by_path():
    with tpo.Context() as ctx:
        (r, g, y), _ = returns(ctx)
        sdg = ctx.sdg
    outs = {n: [] for n in sdg.nodes}
    for e in sdg.edges:
        outs[e.src].append(e)
    moves = fuse.Moves(sdg, isl_domains.analyse(sdg, list(sdg.nodes)))
    dims = sdg.nodes[y.node.id].domain
    # r feeds the slice sum g, which y reads at the same point: r and y cannot share an island
    assert not fuse._schedulable(sdg, {r.node.id, y.node.id}, outs, dims, moves)
    g_reads_r = next(e for e in sdg.edges if e.src == r.node.id and e.sink != y.node.id)
    assert moves.of(g_reads_r, dims) == (fuse.ANY,)


def test_isl_decides_reads_that_are_not_constant_offsets():
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        x = tpo.from_numpy(XS[:, 0], dims=(i,))
        block = x[(i // 2) * 2] + x          # at most i
        window = x[0:i + 1].sum() + x        # at most i
        before = x[tpo.max(i - 1, 0)] + x    # at most i (equal at i = 0)
        sdg = ctx.sdg
        moves = fuse.Moves(sdg, isl_domains.analyse(sdg, list(sdg.nodes)))
    reads = sorted(moves.of(e, (i,)) for e in sdg.edges if e.src == x.node.id)
    assert reads == [(fuse.SAME,)] * 3 + [(fuse.AT_MOST,)] * 3
    assert fuse._earlier((fuse.AT_MOST, fuse.EARLIER)) and not fuse._earlier((fuse.AT_MOST, fuse.SAME))
    assert not fuse._earlier((fuse.ANY, fuse.EARLIER)) and fuse._earlier((fuse.EARLIER, fuse.ANY))


def test_islands_in_a_forward_and_a_backward_recurrence_stay_schedulable():
    """GAE: ``after_end`` runs forward in time, the advantages backward. Joining
    nodes of both into two islands can close a cycle through the two; each island
    is checked with the islands already formed taken as one node each."""
    rng = np.random.default_rng(2)
    reward, value = rng.standard_normal((2, 7)), rng.standard_normal((2, 7))
    done = rng.random((2, 7)) < 0.3

    def build(ctx):
        (b, B), (t, T) = ctx.dims("b", "t")
        r, v = tpo.from_numpy(reward, dims=(b, t)), tpo.from_numpy(value, dims=(b, t))
        adv, ret = tpo.rl.gae(r, v, tpo.from_numpy(done, dims=(b, t)), 0.9, 0.8)
        return [adv, ret], lambda bounds: {B: 2, T: 7}

    (fused, got), (_, want) = run_both(build, {})
    assert islands(fused)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def test_an_intermediate_of_an_island_can_be_fetched():
    def build(ctx):
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        a = x.exp()
        b = (a * 3.0).sum()
        return [a, b], lambda bounds: {T: bounds["T"]}

    (fused, (a, b)), _ = run_both(build, {"T": 4})
    np.testing.assert_allclose(a, np.exp(XS[:4]), rtol=1e-12)
    np.testing.assert_allclose(b, 3.0 * np.exp(XS[:4]).sum(axis=1), rtol=1e-12)
    assert len(islands(fused)) == 1 and len(islands(fused)[0].op.outputs) == 2


def test_the_rl_program_is_the_same_with_fewer_nodes():
    from tests.transforms.test_vectorize import rl_like

    (fused, got), (plain, want) = run_both(rl_like, {"B": 3, "I": 3, "T": 5})
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)
    assert islands(fused) and len(fused.sdg.nodes) < len(plain.sdg.nodes)


def test_a_failure_inside_an_island_names_the_users_line():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.arange(3.0), dims=())
        y = (x.spatial[t] * 2.0).exp()  # x has 3 entries: fails at t = 3
        program = ctx.compile([y], passes={"vectorize": False})
        island = program.sdg.nodes[program.sdg.resolve(y.node.id)[0]]
        assert [step.op.name for step in island.op.steps] == ["SpatialIndexOp", "ElementwiseOp", "ElementwiseOp"]
        with pytest.raises(TempoError) as info:
            program.run({T: 5})
    assert "SpatialIndexOp failed at t=3" in str(info.value)
    assert "y = (x.spatial[t] * 2.0).exp()" in str(info.value)


@st.composite
def chains(draw):
    """A random program over t: each node applies a unary or binary op to earlier
    nodes, read at t, or at t - 1 through a placeholder seeded at t = 0."""
    nodes = draw(st.lists(st.tuples(st.sampled_from(["tanh", "sin", "add", "mul", "lag"]),
                                    st.integers(0, 10 ** 6), st.integers(0, 10 ** 6)), min_size=2, max_size=9))
    return nodes


def build_chain(spec):
    def build(ctx):
        (t, T), = ctx.dims("t")
        values = [tpo.from_numpy(XS, dims=(t,))]
        for kind, a, b in spec:
            x, y = values[a % len(values)], values[b % len(values)]
            if kind == "lag":
                lag = tpo.placeholder((3,), "float64", dims=(t,))
                lag[0] = x[0] * 0.5
                lag[t + 1] = x[t] + lag[t] * 0.25
                values.append(lag)
            elif kind in ("add", "mul"):
                values.append(x + y if kind == "add" else x * y * 0.5)
            else:
                values.append(getattr(x, kind)())
        return values[1:], lambda bounds: {T: bounds["T"]}

    return build


@settings(max_examples=15, deadline=None)
@given(chains())
def test_random_programs_compute_the_same_fused_and_unfused(spec):
    (_, got), (_, want) = run_both(build_chain(spec), {"T": 4})
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def test_per_point_gradients_and_the_contraction_summing_them_are_one_island():
    """The batch of per-point values vectorized over (b, t) that the weight gradient's contraction
    sums is read only inside its island: fused with the contraction, it is never stored."""
    from tempo.ir import ops

    def weight_gradient(ctx):
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        rng = np.random.default_rng(0)
        w = tpo.nn.parameter(rng.normal(size=(3, 2)), dims=(i,))
        x = tpo.from_numpy(rng.normal(size=(4, 5, 3)), dims=(b, t))
        (x.unsqueeze(0) @ w).squeeze(0).tanh()[0:B, i, 0:T].sum().backward()
        tpo.optim.SGD([w], lr=0.1).step()
        return [w], lambda bounds: {B: 4, I: 3, T: 5}

    (fused, got), (_, want) = run_both(weight_gradient, {})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    (island,) = [n for n in islands(fused) if any(isinstance(s.op, ops.BatchContractOp) for s in n.op.steps)]
    assert any(s.shapes and len(s.shapes[0]) > 2 for s in island.op.steps)  # a (T, B, ...) batch inside
    assert all(len(shape) <= 2 for shape in island.shapes)  # only parameter-sized values leave it
