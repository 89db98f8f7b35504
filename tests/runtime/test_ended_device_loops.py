"""A loop over iterations that holds a loop over a dim that ends at run time, as one device program.

On JAX the loop over ``i`` runs whole (``lax.scan`` over ``i``), the loop over ``t`` in it running to
the cap with every step after the end skipped, ``T[i]`` a value on the device, and what follows it in
the iteration (sums and means over ``0:T``, suffix sums ``r[t:T]``, a learner's gradients, those of a
mean dividing by ``T[i]``) reading the rows padded past ``T[i]`` as zeros
(:mod:`tempo.plan.ended_rows`), and a read at ``T - 1`` picking row ``T[i] - 1``. Each program is
checked against the NumPy backend (the host loop, the flag read at every step) for several ``k``: the
same lengths and values (float32: rtol 1e-5), the same launches whatever the lengths, and a statement
the padded rows cannot serve (a max over ``0:T``) leaves the loop over ``i`` on the host and still
gives NumPy's values.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.runtime.backends import base
from tests.rl.tensor_cartpole import acting

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

EVERY = (1, 3, None)  # Config(end_check_every): no effect on a loop the device runs to its end


def episodes(xs: np.ndarray, threshold: float, every: int | None, backend: str, reads: str = "sums"):
    """``h[i, t + 1] = tanh(h[i, t] W) + x[t + 1] + b[i]`` (rows of 4, ``xs[0]``: ``x``, its first rows
    ``h[i, 0]`` and ``b[i]`` where ``i = 0``) until ``h[i, t].sum() > threshold``;
    ``reads`` picks what each iteration computes from its ``T[i]`` rows: ``sums`` (sums over ``0:T``, of
    an elementwise map too, and of suffix sums ``total[i, t:T]``), ``learner`` (a linear layer's loss
    summed over ``0:T`` and SGD on its weights, carried from iteration to iteration), ``mean_learner`` (the
    same loss averaged over ``0:T``, not fetched: its gradient divides by ``T[i]``), ``last``
    (``h[i, T - 1]``), ``mean`` (``h[i, 0:T].mean()``) or ``max`` (``h[i, 0:T].max()``)."""
    iterations, cap, width = xs.shape
    w = np.random.default_rng(1).normal(size=(width, width)).astype(np.float32) / 2
    with tpo.Context(seed=3) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs[0], dims=(t,))
        step = tpo.eval_symbol(i).cast("float32")  # per iteration, computed in it (not a constant read)
        b = tpo.from_numpy(xs[0, 1] - 0.25) + step * 0.05
        h = tpo.placeholder((width,), "float32", dims=(i, t))
        h[i, 0] = tpo.from_numpy(xs[0, 0]) - step * 0.1
        h[i, t + 1] = (h[i, t] @ tpo.from_numpy(w)).tanh() + x[t + 1] + b
        total = h[i, t].sum()
        tpo.end_when(total > threshold)
        if reads == "sums":
            suffix = total[i, t:T].sum()
            fetch = [h[i, 0:T].sum(axis=0), (h[i, 0:T].exp() * 2.0).sum(), (suffix[i, 0:T] * 0.5).sum()]
        elif reads == "learner":
            layer = tpo.nn.Linear(width, 2, dims=(i,))
            loss = (layer(h[i, t]).tanh() ** 2.0)[i, 0:T].sum()
            loss.backward()
            tpo.optim.SGD(layer.parameters(), lr=0.05).step()
            fetch = [loss, layer.weight]
        elif reads == "mean_learner":
            layer = tpo.nn.Linear(width, 2, dims=(i,))
            (layer(h[i, t]).tanh() ** 2.0)[i, 0:T].mean().backward()  # its gradient divides by T[i]
            tpo.optim.SGD(layer.parameters(), lr=0.05).step()
            fetch = [layer.weight, layer.bias]
        elif reads == "last":
            fetch = [h[i, T - 1], h[i, 0:T].sum(axis=0)]
        elif reads == "mean":
            fetch = [h[i, 0:T].mean(axis=0)]
        else:
            fetch = [h[i, 0:T].max(axis=0)]
        program = ctx.compile(fetch=fetch, backend=backend, config=tpo.Config(end_check_every=every))
    return program, {"I": iterations, "T": cap}


def _run(*args, **kwargs):
    program, bounds = episodes(*args, **kwargs)
    return program, program.run(bounds)


def _whole(program) -> bool:
    """Whether the loop over i is one device program holding the loop over the ended dim."""
    return any(p.ending is not None for p in program.plan.loops) and "over c0 as one device launch" in program.code


def _assert_same(got, want):
    for g, e in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5, equal_nan=True)


def _check(iterations: int, cap: int, seed: int, threshold: float, reads: str, every_k=EVERY) -> None:
    xs = np.random.default_rng(seed).uniform(-0.5, 1.0, (iterations, cap, 4)).astype(np.float32)
    reference, want = _run(xs, threshold, None, "numpy", reads)
    lengths = reference.lengths["T"]
    for every in every_k:
        program, got = _run(xs, threshold, every, "jax", reads)
        assert _whole(program)
        np.testing.assert_array_equal(program.lengths["T"], lengths)
        _assert_same(got, want)
        check = program.end_checks["T"]
        assert check.steps == lengths.sum()  # no step past an end counted
        assert check.reads == min(iterations, 2)  # the lengths read once per launch: the first iteration, the rest


@pytest.mark.parametrize("reads", ["sums", "learner", "mean_learner", "mean", "last"])
def test_the_loop_over_i_runs_on_the_device_and_matches_numpy(reads):
    _check(5, 16, 7, 3.0, reads, every_k=(1, None))  # T[i]: 16 (the cap), then 5


@pytest.mark.slow
@settings(deadline=None, max_examples=6)
@given(st.tuples(st.integers(1, 5), st.integers(2, 24), st.integers(0, 2 ** 16), st.floats(-1.0, 3.0),
                 st.sampled_from(["sums", "learner", "mean_learner", "mean", "last"])))
def test_drawn_programs_match_numpy_for_every_k(case):
    _check(*case)


def test_the_launches_do_not_depend_on_the_lengths():
    xs = np.random.default_rng(4).uniform(-0.5, 1.0, (6, 20, 4)).astype(np.float32)
    launches, lengths = set(), []
    for shift in (5.0, -3.0):  # every episode one step long, every one to the cap
        program, _ = _run(xs + shift, 2.0, None, "jax")
        launches.add(program.ledger.launches)
        lengths.append(program.lengths["T"].sum())
        host, _ = _run(xs + shift, 2.0, None, "numpy")
        assert program.ledger.launches < host.ledger.launches
    assert len(launches) == 1 and lengths == [6, 6 * 20]
    assert _whole(program)


@pytest.mark.parametrize("reads", ["max"])
def test_a_read_the_padded_rows_cannot_serve_keeps_the_loop_on_the_host(reads):
    xs = np.random.default_rng(5).uniform(-0.5, 1.0, (3, 16, 4)).astype(np.float32)
    reference, want = _run(xs, 2.0, None, "numpy", reads)
    program, got = _run(xs, 2.0, None, "jax", reads)
    assert not _whole(program)
    assert any(p.end is not None for p in program.plan.loops)  # the loop over t is a device loop by itself
    np.testing.assert_array_equal(program.lengths["T"], reference.lengths["T"])
    _assert_same(got, want)


def reinforce(backend: str) -> tuple:
    """REINFORCE on CartPole as tensor ops, each iteration's episodes ended at run time: the returns and
    the rows the learner read, reported by a sink at every iteration."""
    reported = []
    with tpo.Context(seed=1) as ctx:
        ((b, B), (i, I), (t, T)), policy, dist, a, r, d = acting(ctx, 16)
        g = r[b, i, t:T].discounted_sum(0.99)
        alive = tpo.rl.alive(d)
        terms = (dist.log_prob(a) * (g - g[0:B, i, t].mean()) * alive)[0:B, i, 0:T]
        (-(terms.sum() / alive[0:B, i, 0:T].sum())).backward()
        tpo.optim.Adam(policy.parameters(), lr=1e-2).step()
        seen = alive[0:B, i, 0:T]
        tpo.sink(tpo.cat([r[0:B, i, 0:T].sum().reshape(1), (seen >= 0.0).cast("float32").sum().reshape(1)]),
                 lambda value, point: reported.append(value.tolist()))
        program = ctx.compile([], backend=backend)
    program.run({B: 4, I: 5, T: 40})
    return program, reported


def test_reinforce_with_episodes_ended_at_run_time_runs_as_one_program_and_matches_numpy():
    program, got = reinforce("jax")
    reference, want = reinforce("numpy")
    assert _whole(program) and "ends at run time" in str(program.plan)
    (plan,) = [p for p in program.plan.loops if p.ending is not None]
    assert any(n.plan.padded_dim is not None and n.plan.end is None for n in plan.nested)  # a loop run to T
    np.testing.assert_array_equal(program.lengths["T"], reference.lengths["T"])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert [rows for _, rows in got] == [4 * n for n in reference.lengths["T"]]  # B * T[i] rows, none past
