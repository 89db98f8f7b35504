"""Partial unrolling (TEMPO §5.3, ``passes={"partial_unroll": True}``): isl separates loops so
that boundary conditions are tested once per piece; the AST has fewer ``if`` nodes, the run
tests fewer conditions, and every program computes what it computes without it."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.runtime.backends import base
from tempo.schedule import ast
from tests.schedule.chains import build_chain

XS = np.random.default_rng(0).normal(size=(3, 6, 2)).astype(np.float32)
ON, OFF = {"partial_unroll": True}, {"partial_unroll": False}



def top_level_executes(stmt: ast.Stmt) -> list[ast.Execute]:
    """The Execute statements in no loop."""
    if isinstance(stmt, ast.Sequence):
        return [ex for s in stmt.body for ex in top_level_executes(s)]
    if isinstance(stmt, ast.If):
        return top_level_executes(stmt.then) + (top_level_executes(stmt.orelse) if stmt.orelse is not None else [])
    return [stmt] if isinstance(stmt, ast.Execute) else []


def recurrence(passes):
    """``s[0] = r[0]; s[t + 1] = s[t] + r[t + 1]``: the step runs for ``t < T - 1`` only."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(np.arange(8.0), dims=(t,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = r[0]
        step = s[t] + r[t + 1]
        s[t + 1] = step
        return ctx.compile(fetch=[s, r[t:T].sum()], passes=passes), s, step


def test_the_last_step_of_a_recurrence_is_peeled_instead_of_tested_at_every_step():
    (on, s, step), (off, _, _) = recurrence(ON), recurrence(OFF)
    assert ast.if_nodes(on.ast) < ast.if_nodes(off.ast)
    assert [ex.node_id for ex in top_level_executes(off.ast) if ex.node_id == s.node.id] == []
    peeled, = [ex for ex in top_level_executes(on.ast) if ex.node_id == s.node.id]
    assert str(peeled.point[0]) == "T - 1"
    loop, = [x for x in on.ast.body if isinstance(x, ast.Loop) and step.node.id in
             {ex.node_id for ex in ast.statements(x)}]
    assert str(loop.cond) == "c0 < T - 1" and not ast.if_nodes(loop)
    assert ast.conditions_tested(on.ast, {"T": 8}) == 0 and ast.conditions_tested(off.ast, {"T": 8}) == 8
    for got, want in zip(on.run({"T": 8}), off.run({"T": 8})):
        np.testing.assert_array_equal(got, want)


def rl_like(ctx):
    """Acting over ``t`` inside iterations over ``i``: a state recurrence, a reward, returns
    over the episode, and a parameter carried from iteration to iteration."""
    (i, I), (t, T) = ctx.dims("i", "t")
    x = tpo.from_numpy(XS, dims=(i, t))
    w = tpo.placeholder((2,), "float32", dims=(i,))
    w[0] = tpo.full((2,), 0.5, "float32")
    o = tpo.placeholder((2,), "float32", dims=(i, t))
    o[i, 0] = x[i, 0]
    o[i, t + 1] = (o[i, t] * w[i]).tanh() + x[i, t + 1]
    r = (o * o).sum()
    g = r[i, t:T].discounted_sum(0.9)
    w[i + 1] = w[i] - 0.01 * (g[i, 0:T].mean() * o[i, 0:T].mean(axis=0))
    return [o, g, w]


def window(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS[0, :, 0], dims=(t,))
    return [x[tpo.max(0, t - 2):t + 1].mean(), x[(t % 2) == 0] * 2.0]


def next_step(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    v, outs = build_chain(["recur", "next", "causal"], XS, i, t, T)
    return outs + [v]


BOUNDS = {"T": 6, "I": 3}


def run(build, passes, backend="numpy"):
    with tpo.Context() as ctx:
        fetch = build(ctx)
        program = ctx.compile(fetch=fetch, passes=passes, backend=backend)
    bounds = {k: v for k, v in BOUNDS.items() if k in program.domains.params}
    return program, program.run(bounds), bounds


@pytest.mark.parametrize("build", [rl_like, window, next_step])
def test_programs_compute_the_same_with_and_without_it(build):
    (on, got, bounds), (off, want, _) = run(build, ON), run(build, OFF)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert ast.conditions_tested(on.ast, bounds) <= ast.conditions_tested(off.ast, bounds)
    assert on.plan == off.plan


def test_an_rl_like_program_tests_fewer_conditions():
    (on, _, bounds), (off, _, _) = run(rl_like, ON), run(rl_like, OFF)
    assert ast.conditions_tested(on.ast, bounds) < ast.conditions_tested(off.ast, bounds)


def test_it_is_off_by_default():
    (default, _, _), (off, _, _) = run(rl_like, None), run(rl_like, OFF)
    assert str(default.ast) == str(off.ast)


@pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")
def test_on_jax_the_results_agree_where_the_device_loops_give_way():
    """JAX runs a loop whose statements each run once as one device program; a loop whose
    statements partial unrolling repeats in a peeled iteration runs statement by statement."""
    (_, got, _), (_, want, _) = run(rl_like, ON, "jax"), run(rl_like, OFF)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_the_main_loop_with_its_last_iteration_peeled_still_frees_as_it_goes():
    """The update ``state[i + 1]`` does not run at the last iteration, which isl peels; the
    peeled iteration continues the loop, so ``state``'s points are freed after each iteration."""
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        state = tpo.placeholder(shape=(4,), dtype="float32", dims=(i,))
        state[0] = tpo.ones((4,), "float32")
        mean = state.mean()
        state[i + 1] = state[i] - 0.5 * mean[i]
        on = ctx.compile(fetch=[mean], passes=ON)
    assert any(ex.node_id == state.node.id and str(ex.point[0]) == "I - 1" for ex in top_level_executes(on.ast))
    assert state.node.id in {e.node for e in on.plan.evictions}
    out, = on.run({"I": 12})
    assert out[10] == 0.5 ** 10


def test_partial_unroll_takes_a_bool():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.arange(3.0), dims=(t,))
        with pytest.raises(tpo.TempoError, match="partial_unroll.*True or False"):
            ctx.compile([x], passes={"partial_unroll": "yes"})


@settings(max_examples=12, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "shift", "window", "causal", "whole", "recur", "next"]),
                min_size=1, max_size=5), st.booleans())
def test_random_programs_compute_the_same_with_and_without_it(chain_ops, fuse):
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        v, outs = build_chain(chain_ops, XS, i, t, T)
        return outs + [v]

    extra = {} if fuse else {"fuse": False}
    (on, got, bounds), (off, want, _) = run(build, {**ON, **extra}), run(build, {**OFF, **extra})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert ast.conditions_tested(on.ast, bounds) <= ast.conditions_tested(off.ast, bounds)
