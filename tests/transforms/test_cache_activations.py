"""Activation caching: a learner that replays the actor's forward pass reads the actor's activations."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.ir import ops
from tempo.transforms import cache_activations, run_pipeline

UPTO = ("cse", "simplify", "domain_reduction", "lift")


def compiled(build, cache: bool):
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx)
        program = ctx.compile(fetch, passes={"fuse": False, **({} if cache else {"cache_activations": False})})
        return program, program.run(bounds)


def learner_nodes(program, domain_names=("i",)):
    return [n for n in program.sdg.nodes.values() if tuple(d.name for d in n.domain) == domain_names]


def replay(ctx, learner_index=lambda i: i, width=3, B_=4, T_=5, I_=3):
    """An actor over (b, i, t) and a learner over i that replays it on the batch of ``learner_index(i)``."""
    (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
    rng = np.random.default_rng(0)
    w = tpo.nn.parameter(rng.normal(size=(2, width)).astype(np.float32), dims=(i,))
    bias = tpo.nn.parameter(rng.normal(size=(width,)).astype(np.float32), dims=(i,))
    x = tpo.from_numpy(rng.normal(size=(B_, I_, T_, 2)).astype(np.float32), dims=(b, i, t))
    acted = (x @ w + bias).tanh().sum(axis=-1)                  # the actor, point by point
    k = learner_index(i)
    replayed = (x[0:B, k, 0:T] @ w + bias).tanh()               # the learner, over the batch
    loss = (replayed.sum(axis=-1) * acted[0:B, k, 0:T].detach()).mean()
    loss.backward()
    tpo.optim.SGD([w, bias], lr=0.1).step()
    return [w, bias, loss], {B: B_, I: I_, T: T_}


def test_the_learner_reads_the_actors_activations_and_trains_the_same():
    (fast, got), (slow, want) = compiled(replay, True), compiled(replay, False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    def forward_products(program):
        return [n for n in learner_nodes(program) if isinstance(n.op, ops.MatMulOp)
                and [str(s) for s in n.shapes[0]] == ["B", "T", "3"]]

    assert len(forward_products(slow)) == 1 and not forward_products(fast)


def test_the_pass_drops_the_replayed_forward_from_the_sdg():
    with tpo.Context() as ctx:
        replay(ctx)
        sdg, _ = run_pipeline(ctx.sdg, pipeline=[(name, m) for name, m in _pipeline() if name in UPTO])
    after = cache_activations.apply(sdg)
    replayed = [n for n in sdg.nodes.values() if _is_replayed_forward(n)]
    assert len(replayed) == 3                     # matmul, bias add, tanh over the batch
    assert not [n for n in after.nodes.values() if _is_replayed_forward(n)]
    tanh = next(n for n in after.nodes.values() if getattr(n.op, "fn", "") == "tanh")
    readers = [e for e in after.edges if e.src == tanh.id]
    assert any(str(e.index) == "[0:B, i, 0:T]" for e in readers), [str(e.index) for e in readers]


def _pipeline():
    from tempo.transforms import PIPELINE
    return PIPELINE


def _is_replayed_forward(node) -> bool:
    return node.site is not None and node.site.code.startswith("replayed =")


def test_a_learner_on_another_update_s_batch_is_left_alone():
    """PPO with two updates per batch: at odd ``i`` the learner's parameters are not the actor's."""
    def build(ctx):
        return replay(ctx, learner_index=lambda i: (i // 2) * 2, I_=4)

    with tpo.Context() as ctx:
        build(ctx)
        sdg, _ = run_pipeline(ctx.sdg, pipeline=[(name, m) for name, m in _pipeline() if name in UPTO])
    assert cache_activations.apply(sdg) is sdg
    (_, got), (_, want) = compiled(build, True), compiled(build, False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_product_with_the_batch_on_the_right_is_not_commuted():
    """``w @ x[0:B, i, 0:T]`` with a vector ``x`` per point is a batch of products only per point."""
    def build(ctx):
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        rng = np.random.default_rng(1)
        w = tpo.from_numpy(rng.normal(size=(3, 2)).astype(np.float32), dims=())
        x = tpo.from_numpy(rng.normal(size=(2, 2, 3, 2)).astype(np.float32), dims=(b, i, t))
        per_point = w @ x
        batched = (w @ x[0:B, i, 0:T].unsqueeze(-1)).squeeze(-1)
        return [per_point.sum(), batched], {B: 2, I: 2, T: 3}

    (_, got), (_, want) = compiled(build, True), compiled(build, False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "relu", "square", "linear", "sum_last", "cast"]), min_size=1, max_size=4),
       st.integers(1, 3), st.integers(1, 4))
def test_random_replayed_chains_compute_what_the_unoptimised_program_does(chain, nb, nt):
    """A random per-point chain, replayed over the batch: on and off agree, and the pass never adds
    nodes."""
    def apply_chain(v, w):
        for step in chain:
            if step == "tanh":
                v = v.tanh()
            elif step == "relu":
                v = v.relu()
            elif step == "square":
                v = v * v
            elif step == "linear" and len(v.shape) and v.shape[-1] == 2:
                v = v @ w
            elif step == "sum_last" and len(v.shape):
                v = v.sum(axis=-1, keepdims=True)
            elif step == "cast":
                v = v.cast("float64")
        return v

    def build(ctx):
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        rng = np.random.default_rng(nb * 10 + nt)
        w = tpo.from_numpy(rng.normal(size=(2, 2)).astype(np.float32), dims=())
        x = tpo.from_numpy(rng.normal(size=(nb, 2, nt, 2)).astype(np.float32), dims=(b, i, t))
        acted = apply_chain(x, w)
        replayed = apply_chain(x[0:B, i, 0:T], w)
        return [acted, replayed], {B: nb, I: 2, T: nt}

    (fast, got), (_, want) = compiled(build, True), compiled(build, False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(np.moveaxis(got[0], 1, 0), got[1], rtol=1e-6)
    (stat,) = [s for s in fast.pass_stats if s.name == "cache_activations"]
    assert stat.nodes_after <= stat.nodes_before


def _with_costs(costs, budget, width=64, B_=8, T_=16):
    """The replay program compiled with activation caching under a ``budget`` and ``costs``;
    returns the learner's replayed forward nodes left after the pipeline and the run's values."""
    def build(ctx):
        return replay(ctx, width=width, B_=B_, T_=T_)

    with tpo.Context() as ctx:
        fetch, bounds = build(ctx)
        cfg = cache_activations.Config(device_budget=budget, bounds={"B": B_, "I": 3, "T": T_}, costs=costs)
        program = ctx.compile(fetch, passes={"fuse": False, "cache_activations": cfg})
        values = program.run(bounds)
    return [n for n in program.sdg.nodes.values() if _is_replayed_forward(n)], values


SLOW_LINK = cache_activations.Costs(device_flops=1e15, device_bytes=1e15, link_bytes=1e6)
FAST_LINK = cache_activations.Costs(device_flops=1e6, device_bytes=1e6, link_bytes=1e15)


def test_under_a_budget_activations_are_recomputed_where_the_link_costs_more():
    batch_bytes = 8 * 16 * 64 * 4  # one activation over the batch: B x T x width float32
    recomputed, got = _with_costs(SLOW_LINK, budget=batch_bytes)
    kept, kept_values = _with_costs(FAST_LINK, budget=batch_bytes)
    fits, want = _with_costs(SLOW_LINK, budget=100 * batch_bytes)
    assert {ops.MatMulOp, ops.ElementwiseOp} <= {type(n.op) for n in recomputed}  # product, bias, tanh
    assert not kept and not fits
    for values in (got, kept_values):
        for g, w in zip(values, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_costs_compare_two_link_crossings_with_the_slower_of_flops_and_bytes():
    costs = cache_activations.Costs(device_flops=100.0, device_bytes=10.0, link_bytes=4.0)
    assert costs.swap_seconds(8) == 4.0
    assert costs.recompute_seconds(flops=200, nbytes=10) == 2.0
    assert costs.recompute_seconds(flops=100, nbytes=30) == 3.0
    cfg = cache_activations.Config(device_budget=64, bounds={}, costs=costs)
    assert cfg.keeps(nbytes=8, flops=10**9, touched=10**9)       # fits its share of the budget
    assert not cfg.keeps(nbytes=16, flops=100, touched=16)       # 8 s of swapping, 1.6 s to recompute
    assert cfg.keeps(nbytes=16, flops=10**4, touched=16)         # 100 s to recompute
