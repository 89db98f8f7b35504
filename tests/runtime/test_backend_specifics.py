"""What the torch and JAX backends must do like NumPy's: the same random bits, NumPy's dtype
promotion, host arrays for user functions; and what the JAX backend must not do: recompile a
step-indexed read at every step, or leave 64-bit types on outside a run."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import base

BACKENDS = [b for b in ("torch", "jax") if b in base.available_backends()]


def random_program(backend: str):
    with tpo.Context(seed=3) as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        u = tpo.random.uniform((3,), dims=(b, t))
        z = tpo.random.normal((2,), dims=(t,))
        scaled = tpo.random.uniform((3,), dims=(b, t), low=-1.0, high=2.0)
        return ctx.run({B: 4, T: 5}, fetch=[u, z, scaled], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_numbers_are_numpys_bit_for_bit(backend):
    """The draws are NumPy's exactly; arithmetic on them (XLA may fuse ``u * 3 - 1`` into one
    multiply-add) is within a float32 rounding."""
    (u, z, scaled), (u0, z0, scaled0) = random_program(backend), random_program("numpy")
    for got, want in ((u, u0), (z, z0)):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(scaled, scaled0, rtol=2 ** -23, atol=2 ** -23)


def promotion_program(backend: str):
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.linspace(0.5, 2.0, 4, dtype=np.float32), dims=(t,))
        step = tpo.eval_symbol(t)                          # int64
        mixed = step * x                                   # int64 * float32 is float64 in NumPy
        ratio = step / (step + 1)                          # int / int is float64
        return ctx.run({T: 4}, fetch=[mixed, ratio, step], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtypes_promote_as_numpy_promotes(backend):
    for got, want in zip(promotion_program(backend), promotion_program("numpy")):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_functions_get_and_give_numpy_arrays(backend):
    seen = []

    def double(x):
        seen.append(type(x))
        return (np.asarray(x) * 2,)

    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(3.0, dtype=np.float32), dims=(t,))
        y = tpo.udf(double, [x + 1.0], [()], ["float32"])
        out, = ctx.run({T: 3}, fetch=[y * 3.0], backend=backend)
    assert seen and all(issubclass(k, (np.ndarray, np.generic)) for k in seen)  # host values, not tensors
    np.testing.assert_array_equal(out, (np.arange(3.0) + 1) * 6)


def test_jax_compiles_a_step_indexed_read_once():
    from tempo.runtime.backends import jax as jax_backend

    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        table = tpo.from_numpy(np.arange(24.0).reshape(8, 3))    # no dims: x[t] is a spatial index by the step
        y = table.spatial[t] * 2.0
        program = ctx.compile(fetch=[y], backend="jax")
    out, = program.run({T: 8})
    np.testing.assert_array_equal(out, np.arange(24.0).reshape(8, 3) * 2)
    compiled = [fn for _, fns in program.backend.compiled.values() for fn in fns.values()]
    assert compiled and all(fn._cache_size() == 1 for fn in compiled)
    assert isinstance(jax_backend.JaxBackend, type)


def test_jax_turns_64_bit_types_on_only_inside_a_run():
    import jax
    import jax.numpy as jnp

    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(4.0), dims=(t,))          # float64
        out, = ctx.run({T: 4}, fetch=[x * 0.1], backend="jax")
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.arange(4.0) * 0.1)
    assert not jax.config.jax_enable_x64
    assert jnp.zeros(1).dtype == jnp.float32
