"""What the torch and JAX backends must do like NumPy's: the same random bits, NumPy's dtype
promotion (every elementwise function, reduction and scan on int, float and bool inputs), host
arrays for user functions; and what the JAX backend must not do: recompile a step-indexed read
at every step, or leave 64-bit types on outside a run."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.ir import ops
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


def test_jax_compiles_once_per_size_not_per_step():
    """A pad of ``min(t, 3)`` rows: one compiled function per distinct size (0, 1, 2, 3), not per step."""
    from tempo.api.vjp import pad

    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(8.0, dtype=np.float32), dims=(t,)).unsqueeze(0)
        y = pad(x, 0, tpo.min(t, 3), 0) * 2.0
        program = ctx.compile(fetch=[y], backend="jax")
    out, = program.run({T: 8})
    for k in range(8):
        np.testing.assert_array_equal(out[k], [0.0] * min(k, 3) + [2.0 * k])
    steps = {id(op): [s.op for s in op.steps] if isinstance(op, ops.FusedOp) else [op]
             for op, _ in program.backend.compiled.values()}
    sizes = [len(fns) for op, fns in program.backend.compiled.values()
             if any(isinstance(x, ops.PadOp) for x in steps[id(op)])]
    assert sizes == [4]


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


@pytest.mark.skipif("jax" not in BACKENDS, reason="JAX is not installed")
@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_jax_stacks_host_values_as_it_stacks_device_values(dtype):
    """A stack of host values (a device loop's rows gathered from a store the host wrote) is the stack
    of the same values on the device: cast to the dtype and shaped alike, more rows than one jitted
    stack takes included."""
    import jax.numpy as jnp

    backend = base.get_backend("jax")
    host = [np.float64(k / 3.0 - 5.0) if dtype == "float32" else np.bool_(k % 3 == 0) for k in range(70)]
    on_host = backend.stack(host, (2, 35), dtype)
    on_device = backend.stack([jnp.asarray(v) for v in host], (2, 35), dtype)
    assert on_host.shape == on_device.shape == (2, 35)
    assert on_host.dtype == on_device.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(on_host), np.asarray(on_device))


def kernel_cases() -> list:
    """(op, inputs) over int64, float32 and bool inputs: every elementwise function, reduction and scan."""
    from tempo.ir import ops
    from tempo.runtime.backends import numpy as np_backend

    rng = np.random.default_rng(0)
    ints = rng.integers(-5, 6, size=(3, 4)).astype(np.int64)
    divisors = rng.integers(1, 4, size=(3, 4)).astype(np.int64)
    floats = rng.standard_normal((3, 4)).astype(np.float32)
    bools = ints > 0
    cases = []
    for fn in np_backend.ELEMENTWISE:
        if fn == "where":
            cases += [(ops.ElementwiseOp(fn), [bools, ints, floats]), (ops.ElementwiseOp(fn), [ints, ints, divisors])]
        elif fn in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne",
                    "and", "or", "mod", "floordiv"):
            for a, b in ((ints, divisors), (ints, floats), (np.abs(floats), divisors), (bools, divisors)):
                cases.append((ops.ElementwiseOp(fn), [a, b]))
        else:
            cases += [(ops.ElementwiseOp(fn), [np.abs(x) if fn in ("log", "sqrt") else x])
                      for x in (ints + 6, floats, bools) if not (x is bools and fn not in ("not", "abs"))]
    for fn in np_backend.REDUCERS:
        for x in (ints, floats, bools):
            cases += [(ops.ReduceOp(fn, axes, keep), [x]) for axes in ((), (0,), (0, 1)) for keep in (False, True)]
    for x in (ints, floats, bools):
        cases += [(ops.CumSumOp(1), [x]), (ops.ScanOp(1), [x]), (ops.ScanOp(0, gamma=0.5, reverse=True), [x]),
                  (ops.ScanOp(1, window=2), [x])]
    return cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_give_numpys_dtypes_and_values(backend):
    from tempo.runtime.backends import get_backend

    reference, chosen = get_backend("numpy"), get_backend(backend)
    wrong = []
    with chosen.running(), np.errstate(all="ignore"):
        for op, xs in kernel_cases():
            want = np.asarray(reference.kernel(op)(xs, {}, ())[0])
            got = chosen.to_numpy(chosen.kernel(op)([chosen.cast(x, x.dtype.name) for x in xs], {}, ())[0])
            same = got.dtype == want.dtype and got.shape == want.shape
            if not (same and np.allclose(got, want, rtol=1e-6, equal_nan=True)):
                wrong.append(f"{op} on {[x.dtype.name for x in xs]}: {got.dtype}{got.shape}, NumPy {want.dtype}"
                             f"{want.shape}")
    assert not wrong, "\n".join(wrong)
