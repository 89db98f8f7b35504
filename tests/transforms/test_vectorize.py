"""The vectorize pass: independent dims become leading spatial axes; results equal the unvectorized program."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.transforms import vectorize


def both(build, bounds):
    """Run ``build(ctx)``'s fetches with and without vectorization."""
    out = []
    for passes in ({"fuse": False}, {"vectorize": False, "fuse": False}):
        with tpo.Context(seed=5) as ctx:
            fetch, named_bounds = build(ctx)
            program = ctx.compile(fetch, passes=passes)
            out.append((program, program.run(named_bounds(bounds))))
    return out


def rl_like(ctx):
    (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
    w = tpo.nn.parameter(np.array([0.5, -0.25], np.float32), dims=(i,))
    obs = tpo.random.normal((2,), dims=(b, i, t))
    logits = tpo.cat([(obs * w).sum().unsqueeze(0), tpo.zeros((1,))])
    dist = tpo.nn.Categorical(logits)
    a = dist.sample()
    r = (a.cast("float32") - 0.5) * obs.spatial[0]
    g = r[b, i, t:T].discounted_sum(0.9)
    loss = -(dist.log_prob(a) * g)[0:B, i, 0:T].mean()
    loss.backward()
    tpo.optim.Adam([w], lr=0.1).step()
    return [a, g, loss, w], lambda n: {B: n["B"], I: n["I"], T: n["T"]}


def test_vectorized_program_equals_the_point_by_point_one():
    (fast, got), (slow, want) = both(rl_like, {"B": 3, "I": 3, "T": 5})
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    b = next(d for d in fast.dim_order if d.name == "b")
    assert any(b in dims for dims in fast.sdg.vectorized.values())
    assert not slow.sdg.vectorized
    assert "for (b" not in str(fast.ast).replace(" ", "") and "b" in str(slow.ast)


def test_a_recurrent_dim_is_not_vectorized():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        x = tpo.from_numpy(np.arange(12.0).reshape(3, 4), dims=(b, t))
        s = tpo.placeholder((), "float64", dims=(b, t))
        s[b, 0] = x[b, 0]
        s[b, t + 1] = s[b, t] + x[b, t + 1]
        assert vectorize.vectorizable(ctx.sdg, b)
        assert not vectorize.vectorizable(ctx.sdg, t)
        out, = ctx.run({B: 3, T: 4}, fetch=[s])
    np.testing.assert_allclose(out, np.cumsum(np.arange(12.0).reshape(3, 4), axis=1))


def test_reads_of_the_whole_vectorized_dim_keep_their_axis_order():
    x = np.arange(24.0).reshape(2, 3, 4)
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        r = tpo.from_numpy(x, dims=(b, i, t)) * 1.0
        per_b = r[0:B, i, 0:T]          # (B, T) at each i
        per_t = r[b, i, 0:T] + r[0:B, i, t].sum()
        got_b, got_t = ctx.run({B: 2, I: 3, T: 4}, fetch=[per_b, per_t])
    assert got_b.shape == (3, 2, 4)
    np.testing.assert_array_equal(got_b, x.transpose(1, 0, 2))
    np.testing.assert_array_equal(got_t, x[:, :, None, :] + x.sum(0)[None, :, :, None])
