"""Program.run interprets what compile made: a second run of a program generates no code and plans nothing."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import base

ROOT = os.path.dirname(tpo.__file__)
PLANNING = tuple(os.path.join(ROOT, *p) for p in (("schedule",), ("plan",), ("transforms",), ("runtime", "codegen.py")))


def _program(backend: str = "numpy"):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.arange(6, dtype=np.float64), dims=(t,))
        y = x[t] * 3.0
        s = tpo.placeholder((), "float64", dims=(t,))
        s[0] = tpo.full((), 0.0, "float64")
        s[t + 1] = (s[t] * 0.5).tanh() + x[t]
        return ctx.compile([y, x[t:T].sum() * 2.0, s], backend=backend)


def _entered(program, bounds) -> set[str]:
    files: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            files.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        out = program.run(bounds)
    finally:
        sys.setprofile(None)
    return files, out


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_a_second_run_generates_no_code_and_plans_nothing(backend):
    if backend not in base.available_backends():
        pytest.skip(f"{backend} is not installed")
    program = _program(backend)
    first, expected = _entered(program, {"T": 6})
    second, got = _entered(program, {"T": 6})
    assert not {f for f in second if f.startswith(PLANNING)}
    assert len(program.runnables) == 1
    assert (backend == "jax") == ("D0(" in program.ran_source)  # the recurrence as one device loop on JAX
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
    x = np.arange(6, dtype=np.float64)
    np.testing.assert_array_equal(got[0], 3.0 * x)


def test_runs_for_new_bounds_reuse_the_generated_code():
    program = _program()
    program.run({"T": 6})
    runnable = next(iter(program.runnables.values()))
    _, (y, total, _) = _entered(program, {"T": 4})
    assert list(program.runnables.values()) == [runnable]
    x = np.arange(4, dtype=np.float64)
    np.testing.assert_allclose(total, [2 * x[t:].sum() for t in range(4)])
