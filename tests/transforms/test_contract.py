"""The contraction pass: a sum over the batch axes of a batch of products is one contraction."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.ir import ops


def both(build):
    out = []
    for passes in ({"fuse": False}, {"fuse": False, "contract": False}):
        with tpo.Context() as ctx:
            fetch, bounds = build(ctx)
            program = ctx.compile(fetch, passes=passes)
            out.append((program, program.run(bounds)))
    return out


def weight_gradient(ctx, B_=4, T_=5):
    """A per-point linear layer and its weight gradient: a sum over (b, t) of outer products."""
    (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
    rng = np.random.default_rng(0)
    w = tpo.nn.parameter(rng.normal(size=(3, 2)).astype(np.float32), dims=(i,))
    x = tpo.from_numpy(rng.normal(size=(B_, T_, 3)).astype(np.float32), dims=(b, t))
    y = (x.unsqueeze(0) @ w).squeeze(0).tanh()
    loss = y[0:B, i, 0:T].sum()
    loss.backward()
    tpo.optim.SGD([w], lr=0.1).step()
    return [w], {B: B_, I: 3, T: T_}


def test_the_weight_gradient_is_one_contraction():
    (fast, got), (slow, want) = both(weight_gradient)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    contractions = [n for n in fast.sdg.nodes.values() if isinstance(n.op, ops.BatchContractOp)]
    assert contractions and not any(isinstance(n.op, ops.BatchContractOp) for n in slow.sdg.nodes.values())
    assert all(n.shapes[0] == (3, 2) for n in contractions)


def test_the_replaced_product_leaves_the_program():
    """The batch of products the contraction replaces is dropped with the permutations before its
    sum: nothing reads them, and a fused island would still compute them."""
    (fast, _), (slow, _) = both(weight_gradient)
    def batched_products(program):
        return [n for n in program.sdg.nodes.values() if isinstance(n.op, ops.MatMulOp) and len(n.shapes[0]) > 2]
    assert len(batched_products(slow)) > len(batched_products(fast))
    read = {e.src for e in fast.sdg.edges}
    assert all(n.id in read or n.id in fast.sdg.roots for n in fast.sdg.nodes.values())


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 3), st.integers(2, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.permutations([0, 1]))
def test_random_batched_products_summed_over_their_batch(nb, nt, m, k, n, order):
    rng = np.random.default_rng(nb * 100 + nt * 10 + m)
    a, c = rng.normal(size=(nb, nt, m, k)), rng.normal(size=(nb, nt, k, n))

    def build(ctx):
        x, y = tpo.from_numpy(a), tpo.from_numpy(c)
        product = (x @ y).permute(*order, 2, 3)
        return [product.sum(axis=(0, 1))], {}

    (fast, got), (_, want) = both(build)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[0], np.einsum("btmk,btkn->mn", a, c), rtol=1e-10, atol=1e-12)
    assert any(isinstance(node.op, ops.BatchContractOp) for node in fast.sdg.nodes.values())
