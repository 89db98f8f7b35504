"""compile_program pauses Python's cyclic garbage collector while it compiles, and leaves it as it was."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import tempo as tpo
from tempo.api import stages


def _compile(program_is_bad: bool = False):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.arange(6, dtype=np.float64), dims=(t,))
        s = tpo.placeholder((), "float64", dims=(t,))
        if not program_is_bad:
            s[0] = tpo.full((), 0.0, "float64")
        s[t + 1] = s[t] * 0.5 + x[t]
        return ctx.compile([s, x[t:T].sum()])


@pytest.fixture
def collector_seen(monkeypatch):
    """Whether the collector was on in each lowering (the first stage of every compile)."""
    seen, lower = [], stages.lower

    def observed(request):
        seen.append(gc.isenabled())
        return lower(request)

    monkeypatch.setattr(stages, "lower", observed)
    return seen


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_while_compiling_and_as_it_was_after(collector_seen, enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        program = _compile()
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert collector_seen == [False]
    x = np.arange(4.0)
    np.testing.assert_allclose(program.run({"T": 4})[1], [x[t:].sum() for t in range(4)])


def test_the_collector_is_back_on_after_a_failed_compile():
    assert gc.isenabled()
    with pytest.raises(tpo.DefinitionError):
        _compile(program_is_bad=True)
    assert gc.isenabled()
