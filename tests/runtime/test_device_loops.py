"""Whole loops as one device program (tempo/runtime/device_loops.py, backends/jax_loops.py).

Each program runs on NumPy (statement by statement) and on JAX, where the
loops whose body is all device code run as one ``lax.scan`` launch; the
fetched values must agree (float32: rtol 1e-5, atol 1e-6; float64 and
integers: exact up to rtol 1e-12), and the JAX run must have launched the
loop whole (fewer launches than NumPy's, and a ``D<k>`` call in its source).
"""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime import device_loops, executor, step_values
from tempo.runtime.backends import base
from tempo.runtime.executor import Executor

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")


def _run(program, bounds, backend):
    program.backend = base.get_backend(backend)
    out = program.run(bounds)
    return out, program.ledger.launches


def _compare(build, bounds, rtol=1e-5, atol=1e-6):
    """Run the program ``build()`` returns on NumPy and JAX; the JAX run launches fewer kernels."""
    program = build()
    expected, numpy_launches = _run(program, bounds, "numpy")
    got, jax_launches = _run(program, bounds, "jax")
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    assert jax_launches < numpy_launches
    return program


def test_recurrence_with_carried_and_gathered_values():
    """s[t + 1] reads s[t] (carried), x[t] (computed before the loop, gathered) and w (closed over)."""
    xs = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)

    def build():
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            x = tpo.from_numpy(xs, dims=(t,))
            w = tpo.full((3,), 0.5, "float32")
            s = tpo.placeholder((3,), "float32", dims=(t,))
            s[0] = tpo.full((3,), 1.0, "float32")
            s[t + 1] = (s[t] * w).tanh() + x[t] * 0.1
            y = s[0:T].sum(axis=0)
            return ctx.compile([s, y])

    _compare(build, {"T": 12})


def test_two_steps_back_and_a_condition():
    """f[t] = f[t - 1] + f[t - 2] (two carried values) from f[0], f[1], in float64 and int64."""

    def build():
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            f = tpo.placeholder((), "float64", dims=(t,))
            f[0] = tpo.full((), 1.0, "float64")
            f[1] = tpo.full((), 1.0, "float64")
            f[t + 2] = f[t + 1] + f[t] * 1.0
            k = tpo.eval_symbol(t) * 2 + f[t].cast("int64")
            return ctx.compile([f, k])

    program = _compare(build, {"T": 20}, rtol=1e-12, atol=0)
    out, = program.run({"T": 20})[:1]
    assert out[-1] == 6765.0


@pytest.mark.parametrize("dist, host_draws", [("uniform", False), ("normal", True)])
def test_random_numbers_in_a_device_loop_are_numpys_uniform_ones_drawn_on_the_device(monkeypatch, dist, host_draws):
    """A recurrence over t reads random numbers of (b, t), b vectorized: the JAX run's values are
    NumPy's, bit for bit; the device draws the uniform numbers (the host draws none per launch) and the
    host the normal ones."""
    def build():
        with tpo.Context(seed=3) as ctx:
            (b, B), (t, T) = ctx.dims("b", "t")
            u = getattr(tpo.random, dist)((2,), dims=(b, t))
            s = tpo.placeholder((2,), "float32", dims=(b, t))
            s[b, 0] = tpo.full((2,), 1.0, "float32")
            s[b, t + 1] = s[b, t] * 0.5 + u[b, t]
            return ctx.compile([s])

    program = build()
    expected, numpy_launches = _run(program, {"B": 3, "T": 9}, "numpy")
    drawn = []
    over = step_values.Draw.over
    monkeypatch.setattr(step_values.Draw, "over", lambda self, *args: drawn.append(args[-1]) or over(self, *args))
    got, jax_launches = _run(program, {"B": 3, "T": 9}, "jax")
    assert jax_launches < numpy_launches
    assert [np.asarray(g).tobytes() for g in got] == [np.asarray(e).tobytes() for e in expected]
    assert bool(drawn) == host_draws


def test_ppo_acting_loop_is_one_launch_and_matches_numpy():
    """PPO on the tensor Synthetic environment: its acting loop over t runs as one scan per
    iteration, and training reports NumPy's returns (rtol 1e-4)."""
    import importlib.util
    import os
    import sys

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ppo_fixed_horizon.py")
    spec = importlib.util.spec_from_file_location("ppo_device_loops", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo_device_loops"] = module
    spec.loader.exec_module(module)
    fields = dict(iterations=3, epochs=2, batch=16, steps=30, env="tempo/Synthetic-v0", impl="tensor",
                  obs_shape="3,4,4", hidden=16)
    calls = []
    original = device_loops.DeviceLoop.launches

    def counted(self, env):
        launches = original(self, env)
        calls.append(launches)
        return launches

    expected = module.main(module.Args(backend="numpy", **fields))["returns"]
    device_loops.DeviceLoop.launches = counted
    try:
        got = module.main(module.Args(backend="jax", **fields))["returns"]
    finally:
        device_loops.DeviceLoop.launches = original
    assert got == pytest.approx(expected, rel=1e-4)
    assert calls and all(launches.ran for launches in calls)
    assert len(calls) == 3  # one acting loop per batch of episodes


def test_loop_with_a_user_function_is_not_planned():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 0.0, "float32")
        step = tpo.udf(lambda x: np.asarray(x + 1, np.float32), [s[t]], [()], ["float32"])
        s[t + 1] = step[0] if isinstance(step, (tuple, list)) else step
        program = ctx.compile([s])
    executor = Executor(program.sdg, program.ast, base.get_backend("jax"), {"T": 5}, keep={n for n, _ in program.fetch})
    assert "# the loop over" not in executor.source
    assert program.run({"T": 5})[0].tolist() == [0, 1, 2, 3, 4]


def test_generated_source_calls_the_device_loop_first():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((), "float32", dims=(t,))
        s[0] = tpo.full((), 0.0, "float32")
        s[t + 1] = (s[t] + 1.0).tanh() * 2.0
        program = ctx.compile([s], passes={"fuse": False})
    executor = Executor(program.sdg, program.ast, base.get_backend("jax"), {"T": 5}, keep={n for n, _ in program.fetch})
    assert "L0 = D0.launches({" in executor.source and "o = D0(l, i)" in executor.source
    numpy_executor = Executor(program.sdg, program.ast, base.get_backend("numpy"), {"T": 5},
                              keep={n for n, _ in program.fetch})
    assert "D0" not in numpy_executor.source


def test_a_program_run_again_reuses_its_compiled_loop():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((2,), "float32", dims=(t,))
        s[0] = tpo.full((2,), 0.5, "float32")
        s[t + 1] = (s[t] * 1.5).tanh() + 0.25
        program = ctx.compile([s], passes={"fuse": False})
    program.backend = base.get_backend("jax")
    first = program.run({"T": 7})[0]
    again = program.run({"T": 7})[0]
    np.testing.assert_array_equal(first, again)
    (loop, compiled), = program.backend.loops.values()
    assert len(compiled.fns) == 1


def test_a_loop_the_device_cannot_run_runs_statement_by_statement(monkeypatch):
    """Where the compiled loop fails (here: made to), the generated code runs the loop itself, and a
    warning names the loop and the failure."""
    from tempo.runtime.backends import jax_loops

    def fail(self, *args):
        raise RuntimeError("no compiled loop here")

    monkeypatch.setattr(jax_loops.LoopProgram, "__call__", fail)
    xs = np.arange(10, dtype=np.float32).reshape(5, 2)

    def build():
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            x = tpo.from_numpy(xs, dims=(t,))
            s = tpo.placeholder((2,), "float32", dims=(t,))
            s[0] = tpo.full((2,), 0.0, "float32")
            s[t + 1] = (s[t] * 0.5).tanh() + x[t]
            return ctx.compile([s])

    program = build()
    expected, numpy_launches = _run(program, {"T": 5}, "numpy")
    with pytest.warns(UserWarning, match=r"device loop D\d+ \(the loop over t\) could not run as one device "
                                         r"program \(RuntimeError: no compiled loop here\)"):
        got, jax_launches = _run(program, {"T": 5}, "jax")
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert jax_launches == numpy_launches


def test_a_row_read_from_the_second_step_on_is_gathered_as_one_view(monkeypatch):
    """``s[t] = s[t - 1] * w + x[t]`` for ``t >= 1``: the loop's first trip does not read ``x``, the
    others read consecutive rows of its block store, which the launch takes as one view rather than
    row by row (the first row is read, and never used)."""
    xs = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)
    row_reads = []
    held = executor.held
    monkeypatch.setattr(executor, "held",
                        lambda store, indices: row_reads.extend([store.name] * len(indices)) or held(store, indices))

    def build():
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            x = tpo.placeholder((3,), "float32", dims=(t,))
            x[t] = tpo.from_numpy(xs, dims=(t,)).tanh()
            s = tpo.placeholder((3,), "float32", dims=(t,))
            s[0] = tpo.full((3,), 1.0, "float32")
            s[t] = s[t - 1] * 0.5 + x[t]
            return ctx.compile([s, x[0:T].sum(axis=0)])

    _compare(build, {"T": 10})
    assert len(row_reads) == len(set(row_reads)), row_reads  # no store read once per row
