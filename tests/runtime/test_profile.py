"""program.profile(bounds): launches and host work per iteration, by statement kind."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo


def learner(ctx, sink: bool):
    """A parameter updated once per iteration of i from a loop over t, optionally reported by a sink."""
    (i, I), (t, T) = ctx.dims("i", "t")
    w = tpo.placeholder((), "float32", dims=(i,))
    w[0] = tpo.full((), 1.0, "float32")
    x = tpo.placeholder((), "float32", dims=(i, t))
    x[i, 0] = w[i]
    x[i, t + 1] = (x[i, t] * 0.5).tanh() + w[i]
    w[i + 1] = w[i] - 0.1 * x[i, 0:T].sum()
    seen = []
    if sink:
        tpo.sink(w[i], lambda value, point: seen.append((point["i"], float(value))))
    return w, I, T, seen


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_profile_counts_each_iterations_launches_and_callbacks(backend):
    if backend == "jax":
        pytest.importorskip("jax")
    with tpo.Context() as ctx:
        w, I, T, seen = learner(ctx, sink=True)
        program = ctx.compile([w], backend=backend)
    profile = program.profile({I: 4, T: 6})
    assert profile.loop == "i" and len(profile.iterations) == len(profile.wall) == 4
    rows = profile.per_iteration()
    assert [p for p, _ in seen] == [0, 1, 2, 3]
    assert profile.host_us() > 0
    if backend == "jax":  # the whole loop over i on the device: its first iteration alone, then the other 3
        assert profile.total("callback") == 0                       # the sink: called after each launch, in its seconds
        assert rows["device loop"][0] == pytest.approx(1 / 3) and "store read" not in rows
        assert [launches for launches, _ in (it["device loop"] for it in profile.iterations)] == [1, *[1 / 3] * 3]
        assert "D0(" in program.code and "D1(" in program.code
    else:
        assert profile.total("callback") == 4                       # the sink, once per step of i
        assert rows["callback"][0] == 1                               # ... within the iteration it reports
        assert rows["kernel"][0] >= 6 and rows["store read"][0] > 0  # a launch per step of t
    text = str(profile)
    assert "per iteration of the loop over i" in text and ("device loop" if backend == "jax" else "store read") in text
    (values,) = program.run({I: 4, T: 6})                             # the profiled run computed the same
    np.testing.assert_allclose([v for _, v in seen[4:]], values, rtol=1e-6)


def test_profile_of_a_run_without_a_sink_has_no_callbacks():
    with tpo.Context() as ctx:
        w, I, T, _ = learner(ctx, sink=False)
        program = ctx.compile([w])
    profile = program.profile({I: 3, T: 4})
    assert profile.total("callback") == 0 and profile.total("kernel") > 0
