"""The vectorize pass: independent dims become leading spatial axes; results equal the unvectorized program."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.transforms import batchable, vectorize


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
        assert batchable.vectorizable(ctx.sdg, b)
        assert not batchable.vectorizable(ctx.sdg, t)
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


# ----- partial vectorization (TEMPO §4.2): a recurrence stays a loop, what does not recur is batched -----
def acting_and_learning(ctx):
    """A recurrence over t (acting) and a per-step function of its states read by a sum (learning)."""
    (i, I), (t, T) = ctx.dims("i", "t")
    rng = np.random.default_rng(3)
    x = tpo.from_numpy(rng.normal(size=(3, 6, 4)).astype(np.float32), dims=(i, t))
    w = tpo.from_numpy(rng.normal(size=(4, 4)).astype(np.float32))
    h = tpo.placeholder((4,), "float32", dims=(i, t))
    carry = tpo.placeholder((4,), "float32", dims=(i,))          # a recurrence over i: the outer loop
    carry[0] = tpo.zeros((4,), "float32")
    carry[i + 1] = carry[i] * 0.5 + h[i, T - 1]
    h[i, 0] = x[i, 0] + carry[i]
    h[i, t + 1] = (h[i, t] @ w).tanh() + x[i, t + 1]            # recurrence: stays a loop over t
    value = (h @ w).relu().sum()                                 # per step, no recurrence: vectorized
    nxt = tpo.placeholder((), "float32", dims=(i, t))
    nxt[t < T - 1] = value[i, t + 1]                             # a guarded read of the next point
    nxt[t >= T - 1] = 0.0
    delta = value - 0.9 * nxt
    total = delta[i, 0:T].sum()                                  # learning reads the whole batch
    return [h, value, delta, total], lambda n: {I: n["I"], T: n["T"]}



def counted_launches(program, bounds):
    out = program.run(bounds)
    return out, program.ledger.launches


def test_partial_vectorization_batches_what_does_not_recur():
    results = {}
    for name, cfg in (("partial", vectorize.Config()), ("whole only", vectorize.Config(partial=False))):
        with tpo.Context() as ctx:
            fetch, bounds = acting_and_learning(ctx)
            program = ctx.compile(fetch, passes={"vectorize": cfg, "fuse": False})
            results[name] = (program, *counted_launches(program, bounds({"I": 3, "T": 6})))
    (partial, got, launches), (plain, want, plain_launches) = results["partial"], results["whole only"]
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-5)
    t = next(d for d in partial.dim_order if d.name == "t")
    vectorized = {n for n, dims in partial.sdg.vectorized.items() if t in dims}
    recurrent = [n for n, node in partial.sdg.nodes.items() if t in node.domain]
    assert vectorized and recurrent                        # both kinds exist: the split is partial
    assert not any(t in dims for dims in plain.sdg.vectorized.values())
    assert launches < plain_launches                       # one launch for all t where the value is batched


def test_fig11_cases_each_match_the_unvectorized_program():
    """Drop (both sides batched), promote (a batched reader of the recurrence), broadcast (a
    source without t), select (the recurrence reading a batched tensor at t)."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.arange(10, dtype=np.float32).reshape(2, 5), dims=(i, t))
        scale = tpo.placeholder((), "float32", dims=(i,))   # a recurrence over i: the outer loop
        scale[0] = 2.0
        scale[i + 1] = scale[i] * 0.5
        s = tpo.placeholder((), "float32", dims=(i, t))
        u = x * scale                                  # broadcast of scale over t; vectorized
        s[i, 0] = u[i, 0]
        s[i, t + 1] = s[i, t] * 0.5 + u[i, t]          # select: the recurrence reads u at its point
        v = (s + u).exp()                              # promote s, drop u
        fetch = [s, u, v]
        vec = ctx.compile(fetch, passes={"fuse": False})
        ref = ctx.compile(fetch, passes={"fuse": False, "vectorize": False})
    for a, b in zip(vec.run({I: 2, T: 5}), ref.run({I: 2, T: 5})):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert vec.sdg.vectorized and not ref.sdg.vectorized
    kinds = {type(node.op).__name__ for node in vec.sdg.nodes.values()}
    assert "SpatialIndexOp" in kinds                   # the select of u[t] by the recurrence


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_recurrences_match_the_unvectorized_program(data):
    """Random recurrences (offset, combining op) with random readers (point, guarded next point,
    window, whole slice) against the program with vectorization off."""
    T_ = data.draw(st.integers(2, 6), label="T")
    lag = data.draw(st.integers(1, 2), label="lag")
    ops_ = data.draw(st.lists(st.sampled_from(["exp", "tanh", "double", "window", "next", "whole"]),
                              min_size=1, max_size=4), label="readers")
    values = np.linspace(-1, 1, 2 * T_).reshape(2, T_).astype(np.float64)
    outs = []
    for passes in ({"fuse": False}, {"fuse": False, "vectorize": False}):
        with tpo.Context() as ctx:
            (i, I), (t, T) = ctx.dims("i", "t")
            base = tpo.placeholder((), "float64", dims=(i,))   # a recurrence over i: the outer loop
            base[0] = 1.0
            base[i + 1] = base[i] * 0.5
            x = tpo.from_numpy(values, dims=(i, t)) * base
            s = tpo.placeholder((), "float64", dims=(i, t))
            s[t < lag] = x[i, t]
            s[t >= lag] = s[i, t - lag] * 0.5 + x[i, t]
            y = s * 1.0
            fetch = [s]
            for op in ops_:
                if op == "exp":
                    y = (y * 0.1).exp()
                elif op == "tanh":
                    y = y.tanh() + x
                elif op == "double":
                    y = y + y
                elif op == "window":
                    y = y[i, tpo.max(0, t - 1):t + 1].sum()
                elif op == "next":
                    nxt = tpo.placeholder((), "float64", dims=(i, t))
                    nxt[t < T - 1] = y[i, t + 1]
                    nxt[t >= T - 1] = 0.0
                    y = y - nxt
                else:
                    y = y + y[i, 0:T].mean()
                fetch.append(y)
            outs.append(ctx.compile(fetch, passes=passes).run({I: 2, T: T_}))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_a_dim_that_ends_at_run_time_stays_a_loop_in_tensors_without_its_outer_dims():
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    stops = np.array([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], bool)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        k = tpo.eval_symbol(t).cast("float32")  # over t alone: the same for every i
        r = tpo.from_numpy(x, dims=(i, t))
        tpo.end_when(tpo.from_numpy(stops, dims=(i, t)))
        program = ctx.compile([(r * k)[i, 0:T].sum()], passes={"fuse": False})
    (total,) = program.run({I: 2, T: 5})
    np.testing.assert_array_equal(program.lengths["T"], [3, 5])
    np.testing.assert_array_equal(total, [(np.arange(3) * x[0, :3]).sum(), (np.arange(5) * x[1]).sum()])
    without_i = [n for n, node in program.sdg.nodes.items() if i not in node.domain]
    assert without_i and not any(t in program.sdg.vectorized.get(n, ()) for n in without_i)
