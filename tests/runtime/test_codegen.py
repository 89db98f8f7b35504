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
    assert ".read((" in code and ".write(p, o[0])" in code
    assert "free_below(_f0, 0, (_c0 + 1))" in code and "    _f0 = (S" in code  # stores sharing a floor: one call
    assert ".free_below(0, _c0)" in code  # a store alone
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


def test_a_device_loop_launch_is_written_as_a_kernel_launch_and_only_the_generated_code_touches_stores(
        monkeypatch):
    """The generated code shows a device loop's store reads, its one call and its writes, and every
    read, write and free of a store during the run comes from the generated code: the runtime has
    no second path that reads inputs, calls and writes outputs."""
    pytest.importorskip("jax")
    import sys

    from tempo.runtime import stores

    callers = []

    def recorded(method):
        def call(self, *args):
            frame = sys._getframe(1)
            while frame.f_code.co_name == "held" or frame.f_code.co_filename == stores.__file__:
                frame = frame.f_back
            callers.append((method.__name__, frame.f_code.co_filename))
            return method(self, *args)
        return call

    for cls in (stores.PointStore, stores.BlockStore, stores.WindowStore):
        for name in ("read", "write", "write_rows", "free_point"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, recorded(vars(cls)[name]))
    xs = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.placeholder((3,), "float32", dims=(t,))
        x[t] = tpo.from_numpy(xs, dims=(t,)).tanh()
        s = tpo.placeholder((3,), "float32", dims=(t,))
        s[0] = tpo.full((3,), 1.0, "float32")
        s[t] = s[t - 1] * 0.5 + x[t]
        program = ctx.compile([s], backend="jax")
    (got,) = program.run({T: 10})
    want = [np.ones(3, np.float32)]
    for row in np.tanh(xs[1:]):
        want.append(want[-1] * 0.5 + row)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5)
    code = program.code
    launch = code[code.index("L0 = D0.launches("):code.index("if not L0.ran:")]
    assert "i = [held(S" in launch and "o = D0(l, i)" in launch and "D0.done(l)" in launch
    assert ".write(x, v)" in launch or ".write_rows(w[0], w[1], o[0])" in launch
    assert "ledger.launches += 1" in launch
    assert "device loop D0 rows" in program.ledger.by_store  # the loop over t ran as a device launch
    assert callers and {where for _, where in callers} == {"<tempo program>"}, set(callers)
    assert {"read", "write"} <= {name for name, _ in callers}


def test_a_branch_whose_statements_write_no_line_is_still_a_block():
    """A free of a tile's rows where the tensor's store holds points writes no line; inside an ``if``
    the generated source still compiles (the branch is ``pass``) and runs."""
    from tempo.runtime.codegen import Generator
    from tempo.schedule import ast
    from tempo.symbolic.expr import const, make_slice, symbol

    with tpo.Context() as ctx:
        s, T = recurrence(ctx)
        program = ctx.compile(fetch=[s])
    n = next(iter(program.sdg.nodes))
    rows = (make_slice(const(0), const(2)),)
    stmt = ast.Sequence((ast.If(symbol("T") > 1, ast.Free(n, rows), ast.Free(n, rows)),))
    source = Generator(program.sdg, {(n, 0): "point"}, None, ["T"]).source(stmt)
    scope = {}
    exec(compile(source, "<test>", "exec"), scope)      # an empty branch: IndentationError
    assert scope["program"]({"T": 3}) is None
    assert source.count("pass") == 2


def test_an_end_check_takes_its_flag_from_the_launch_just_before_it_else_from_its_store():
    """The flag computed by the launch just before the check (its outputs ``o``) is not read back; a
    flag that a merge writes (no launch of its own) is read from its store. The lengths and values a
    NumPy loop finds, both ways."""
    walk = np.cumsum(np.random.default_rng(2).normal(size=(3, 12)), axis=1).astype(np.float32)
    expected = np.array([next((t + 1 for t in range(12) if abs(row[t]) > 1.5), 12) for row in walk])
    reads = []
    for merged in (False, True):
        with tpo.Context() as ctx:
            (i, I), (t, T) = ctx.dims("i", "t")
            x = tpo.from_numpy(walk, dims=(i, t))
            flag = tpo.udf(lambda v: (np.abs(v) > 1.5,), [x], [()], ["bool"])
            if merged:
                computed, flag = flag, tpo.placeholder((), "bool", dims=(i, t))
                flag[i, 0] = computed[i, 0]
                flag[i, t + 1] = computed[i, t + 1]
            tpo.end_when(flag)
            program = ctx.compile(fetch=[x[i, 0:T].sum()])
        (total,) = program.run({"I": 3, "T": 12})
        np.testing.assert_array_equal(program.lengths["T"], expected)
        np.testing.assert_allclose(total, [walk[k, :n].sum() for k, n in enumerate(expected)], rtol=1e-6)
        reads.append(re.search(r"_T = E\d+\((.*), _c1, _T, ", program.code).group(1))
    assert reads[0] == "o[0]" and re.fullmatch(r"S\d+_0\.read\(\(_c0, _c1, \)\)", reads[1])
