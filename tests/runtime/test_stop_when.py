"""``tpo.stop_when``: a run ends at the first point where a flag holds, keeping what it computed."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo


def doubling(flag_at: float, backend: str):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 1.0, "float32")
        s[t + 1] = s[t] * 2.0
        tpo.stop_when(s[t] >= flag_at)
        return ctx.compile(fetch=[s], backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_run_ends_where_the_flag_first_holds(backend):
    pytest.importorskip(backend)
    program = doubling(20.0, backend)
    (out,) = program.run({"T": 10})
    assert program.stopped_at == {"t": 5}                     # 32 is the first value >= 20
    np.testing.assert_array_equal(out[:6], [1, 2, 4, 8, 16, 32])
    assert np.isnan(out[6:]).all()                            # never computed
    stopped = program.ledger.launches
    never = doubling(1e9, backend)
    (whole,) = never.run({"T": 10})
    assert never.stopped_at is None and never.ledger.launches > stopped
    np.testing.assert_array_equal(whole, 2.0 ** np.arange(10))


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_a_sink_of_what_decides_the_stop_reports_the_stopping_step(backend):
    """A progress report of the value the flag tests sees the step that stops the run; a sink
    that needs more than the flag does still runs only before it."""
    pytest.importorskip(backend)
    seen, later = [], []
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 1.0, "float32")
        s[t + 1] = s[t] * 2.0
        tpo.sink(s, lambda value, point: seen.append((point["t"], float(value))))
        tpo.sink(s * 3.0 + 1.0, lambda value, point: later.append(point["t"]))
        tpo.stop_when(s[t] >= 20.0)
        program = ctx.compile(fetch=[s], backend=backend)
    program.run({"T": 10})
    assert program.stopped_at == {"t": 5}
    assert seen == [(k, 2.0 ** k) for k in range(6)]
    assert later == list(range(5))
