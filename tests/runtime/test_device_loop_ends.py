"""A loop over a dim that ends at run time (``tpo.end_when``) as chunks of device launches.

On JAX the loop over ``t`` whose body is device code runs as launches of ``k`` steps
(``Config(end_check_every=k)``), the flag read once per launch and the steps after it skipped
on the device. Each program is checked against the NumPy backend (the host loop, the flag
read at every step) for several ``k``: the same lengths, the same values (float32: rtol 1e-5),
NaN past each end, and one launch of the loop per chunk of ``k`` steps up to the end.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.runtime.backends import base
from tempo.runtime.ends import MAX_EVERY

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

EVERY = (1, 3, 8, None)  # None: the runtime's choice


def recurrence(xs: np.ndarray, threshold: float, every: int | None, backend: str, noisy: bool = False):
    """``h[i, t + 1] = tanh(h[i, t] W) + x[t + 1] + b[i]`` (rows of 4; ``xs``: (iterations, cap, 4), its
    first rows are ``h[i, 0]`` and ``b[i]``, its first iteration ``x``) until ``h[i, t].sum() > threshold``,
    per iteration ``i``; with ``noisy``, a random draw at each step joins the sum. Fetches ``h``, its
    sum over ``0:T``, ``h[i, T - 1]`` and a suffix sum."""
    iterations, cap, width = xs.shape
    w = np.random.default_rng(1).normal(size=(width, width)).astype(np.float32) / 2
    with tpo.Context(seed=3) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(xs[0], dims=(t,))
        b = tpo.from_numpy(xs[:, 1] - 0.25, dims=(i,))
        h = tpo.placeholder((width,), "float32", dims=(i, t))
        h[i, 0] = tpo.from_numpy(xs[:, 0], dims=(i,))
        step = (h[i, t] @ tpo.from_numpy(w)).tanh() + x[t + 1] + b[i]
        if noisy:
            step = step + tpo.random.normal((width,), dims=(i, t)) * 0.1
        h[i, t + 1] = step
        total = h[i, t].sum()
        tpo.end_when(total > threshold)
        fetch = [h, h[i, 0:T].sum(axis=0), h[i, T - 1], total[i, t:T].sum()]
        program = ctx.compile(fetch=fetch, backend=backend, config=tpo.Config(end_check_every=every))
    return program, {"I": iterations, "T": cap}


def _run(build, *args):
    program, bounds = build(*args)
    out = program.run(bounds)
    return program, out


def _assert_same(got, want):
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)


cases = st.tuples(st.integers(1, 3), st.integers(2, 40), st.integers(0, 2 ** 16), st.floats(-1.0, 3.0),
                  st.booleans())


@settings(deadline=None, max_examples=4)
@given(cases)
def test_chunks_of_k_steps_match_numpy_for_every_k(case):
    iterations, cap, seed, threshold, noisy = case
    xs = np.random.default_rng(seed).uniform(-0.5, 1.0, (iterations, cap, 4)).astype(np.float32)
    reference, want = _run(recurrence, xs, threshold, None, "numpy", noisy)
    lengths = reference.lengths["T"]
    for every in EVERY:
        program, got = _run(recurrence, xs, threshold, every, "jax", noisy)
        np.testing.assert_array_equal(program.lengths["T"], lengths)
        _assert_same(got, want)
        check = program.end_checks["T"]
        k = min(every or MAX_EVERY, cap)
        assert check.every == k
        assert check.steps == lengths.sum()  # no step past an end ran
        assert check.reads == sum(math.ceil(n / k) for n in lengths)  # one read per launch
        if k > 1 and lengths.max() > 2:  # the host loop launches each step's statements
            assert program.ledger.launches < reference.ledger.launches


def test_the_loop_over_t_is_a_device_loop_that_holds_the_check():
    xs = np.random.default_rng(0).uniform(-0.5, 1.0, (2, 30, 4)).astype(np.float32)
    program, _ = recurrence(xs, 1.5, 4, "jax")
    (plan,) = [p for p in program.plan.loops if p.end is not None]
    assert plan.steps[plan.end].node.op.label == "end_when"
    assert any(step.node.op.name == "FusedOp" for step in plan.steps)


def test_steps_past_the_end_leave_nothing_in_the_stores():
    """The flag holds at step 5 of 32, in the middle of a chunk of 8: ``h`` past step 5 is NaN."""
    xs = np.zeros((1, 32, 4), np.float32)
    xs[0, 1] = 0.25  # no bias
    xs[0, 6:] = 1.0  # h's sum rises above 2 from step 6 on, whatever the weights
    program, out = _run(recurrence, xs, 2.0, 8, "jax")
    reference, want = _run(recurrence, xs, 2.0, 8, "numpy")
    (length,) = program.lengths["T"]
    assert length == reference.lengths["T"][0] and length % 8 != 0
    assert np.isnan(out[0][0, length:]).all() and not np.isnan(out[0][0, :length]).any()
    _assert_same(out, want)


def test_a_loop_that_never_ends_runs_to_the_cap():
    xs = np.random.default_rng(2).uniform(-0.5, 0.5, (2, 20, 4)).astype(np.float32)
    program, out = _run(recurrence, xs, 1e9, 6, "jax")
    reference, want = _run(recurrence, xs, 1e9, None, "numpy")
    np.testing.assert_array_equal(program.lengths["T"], [20, 20])
    assert program.end_checks["T"].reads == 2 * 4  # 20 steps in chunks of 6
    _assert_same(out, want)
