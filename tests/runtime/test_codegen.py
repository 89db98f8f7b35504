"""The executor's generated source: loops over locals, inline index arithmetic, the user's line on failure."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError


def recurrence(ctx):
    (t, T), = ctx.dims("t")
    s = tpo.placeholder((), "float32", dims=(t,))
    s[0] = tpo.full((), 0.0, "float32")
    s[t + 1] = (s[t] * 0.5).tanh() + 1.0
    return s, T


def test_program_code_is_the_source_the_executor_runs():
    with tpo.Context() as ctx:
        s, T = recurrence(ctx)
        program = ctx.compile([s], passes={"fuse": False})
    code = program.code
    compile(code, "<test>", "exec")
    assert code.startswith("def program(env):") and "while " in code and "_T = env['T']" in code
    assert ".read((" in code and ".write(p, o[0])" in code and ".free_below(0, (_c0 + 1))" in code
    (got,) = program.run({T: 5})
    want = [0.0]
    for _ in range(4):
        want.append(np.tanh(want[-1] * 0.5) + 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert program.ledger.launches >= 4 * 3
    assert program.code == program.ran_source  # after a run: that run's source


def test_program_code_after_a_run_shows_the_loops_the_backend_runs_whole():
    pytest.importorskip("jax")
    with tpo.Context() as ctx:
        s, T = recurrence(ctx)
        program = ctx.compile([s], backend="jax")
    assert "D0(" not in program.code
    program.run({T: 5})
    assert "D0(" in program.code


def test_a_kernel_failure_in_generated_code_names_the_user_line_and_the_point():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.arange(4, dtype=np.float32), dims=(t,))
        y = tpo.udf(lambda v: (_ for _ in ()).throw(ValueError("bad value")) if v > 2 else v, [x],
                    out_shapes=[()], out_dtypes=["float32"])
        with pytest.raises(TempoError, match=r"UDFOp failed at t=0..3: ValueError: bad value") as err:
            ctx.run({T: 4}, fetch=[y])
    assert "test_codegen.py" in str(err.value)


def test_a_launch_reading_a_window_store_is_written_inline_and_keeps_copies():
    """mean reads a window of x whose rows are overwritten as t advances: its point store keeps copies."""
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.placeholder(shape=(3,), dtype="float64", dims=(t,))
        x[0] = tpo.full((3,), 1.0, "float64")
        mean = x[tpo.max(0, t - 3):t + 1].mean(axis=0)
        x[t + 1] = x[t] * 0.5 + mean
        program = ctx.compile(fetch=[mean], passes={"fuse": False, "lift": False})
    (got,) = program.run({T: 10})
    assert "detach(" in program.ran_source and not re.search(r"\bL\d+\(", program.ran_source)
    xs, want = [np.ones(3)], []
    for step in range(10):
        want.append(np.mean(xs[max(0, step - 3):step + 1], axis=0))
        xs.append(xs[step] * 0.5 + want[-1])
    np.testing.assert_allclose(got, want, rtol=1e-12)
