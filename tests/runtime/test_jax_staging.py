"""A JAX run keeps its kernels' executables, not JAX's staging of them; nothing compiles twice."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import tempo as tpo  # noqa: E402
from tempo.runtime.backends import jax_staging  # noqa: E402

from jax._src.interpreters import pxla  # noqa: E402


def compiles_during(fn) -> int:
    """The XLA compiles ``fn()`` makes."""
    seen = []

    def listen(event, seconds, **_):
        if event == jax_staging.COMPILE_EVENT:
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return len(seen)


def program():
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4), dims=(i, t))
        s = tpo.placeholder((4,), "float32", dims=(i, t))
        s[i, 0] = x[i, 0]
        s[i, t + 1] = (s[i, t] * 0.5).tanh() + x[i, t + 1]
        total = s[i, 0:T].sum() + tpo.eval_symbol(i).cast("float32")
        return ctx.compile([total], backend="jax", passes={"fuse": False}), (I, T)


def test_a_run_drops_the_staging_of_what_it_compiled_and_a_rerun_compiles_nothing():
    compiled, (I, T) = program()
    reference, _ = program()
    first = compiles_during(lambda: compiled.run({I: 2, T: 3}))
    assert first > 0
    assert pxla._dce_jaxpr.cache_info().currsize == 0  # no kernel's jaxpr kept, nor the MLIR lowered from it
    assert compiles_during(lambda: compiled.run({I: 2, T: 3})) == 0
    np.testing.assert_allclose(compiled.run({I: 2, T: 3})[0], reference.run({I: 2, T: 3})[0])


def test_outside_a_run_jax_keeps_its_staging():
    f = jax.jit(lambda x: jax.numpy.sin(x) * 3.0)
    compiles_during(lambda: f(np.ones(7, np.float32)).block_until_ready())
    assert pxla._dce_jaxpr.cache_info().currsize > 0


def test_a_stack_of_many_points_compiles_stacks_of_a_bounded_number_of_operands(monkeypatch):
    """A jitted stack's executable grows with its operands (thousands of scalars: tens of MiB on CPU):
    many points are stacked ``NOTED_ROWS`` at a time and the pieces joined."""
    from tempo.runtime.backends import jax as jax_backend

    widths = []
    stack_some = jax_backend._stack_some
    monkeypatch.setattr(jax_backend, "_stack_some", lambda values, dtype: widths.append(len(values))
                        or stack_some(values, dtype))
    backend = jax_backend.JaxBackend()
    points = [jax.numpy.asarray(np.float32(k)) for k in range(150)]
    with backend.running():
        out = backend.stack(points, (150,), "float32")
    np.testing.assert_array_equal(np.asarray(out), np.arange(150, dtype=np.float32))
    assert max(widths) == jax_backend.NOTED_ROWS and sum(widths) == 150


def test_each_compile_in_a_run_gives_the_freed_memory_back_and_none_outside(monkeypatch):
    """After each compile in a run, glibc's free pages go back to the system (``malloc_trim``), where
    the C library has it; outside a run nothing is trimmed."""
    if jax_staging._trim is None:
        pytest.skip("the C library has no malloc_trim")
    trims, trim = [], jax_staging._trim
    monkeypatch.setattr(jax_staging, "_trim", lambda pad: trims.append(pad) or trim(pad))
    compiled, (I, T) = program()
    compiles = compiles_during(lambda: compiled.run({I: 2, T: 3}))
    assert compiles > 0 and trims == [0] * compiles
    f = jax.jit(lambda x: jax.numpy.cos(x) * 5.0)
    assert compiles_during(lambda: f(np.ones(3, np.float32)).block_until_ready()) == 1
    assert len(trims) == compiles


@pytest.mark.parametrize("setting", [{"GLIBC_TUNABLES": "glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=99"},
                                     {"MALLOC_TRIM_THRESHOLD_": "99"}])
def test_a_process_that_sets_glibcs_trim_threshold_keeps_its_freed_memory(setting):
    probe = "from tempo.runtime.backends import jax_staging; print(jax_staging._trim is None)"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env.pop("GLIBC_TUNABLES", None)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    kept = subprocess.run([sys.executable, "-c", probe], env={**env, **setting}, capture_output=True, text=True)
    trimmed = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert kept.stdout.split() == ["True"], kept.stderr[-2000:]
    assert trimmed.stdout.split() == [str(jax_staging._trim is None)]
