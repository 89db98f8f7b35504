"""Buffer donation (tempo/plan/donation.py): which kernel inputs a launch may hand to its outputs."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.plan import donation
from tempo.runtime.backends import base
from tempo.runtime.executor import Executor


def _chain(fetch_middle: bool):
    """y[t] = exp(x[t] * 2) + 1 and z[t] = y[t] * 3, unfused: z's launch is y[t]'s last reader."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), dims=(t,))
        y = (x * 2.0).exp() + 1.0
        z = (y * 3.0).tanh()
        program = ctx.compile([z, y] if fetch_middle else [z], passes={"fuse": False})
    return program, z


def _donations(program, backend="numpy"):
    executor = Executor(program.sdg, program.ast, base.get_backend(backend), {"T": 4},
                        keep={n for n, _ in program.fetch})
    kinds = {key: store.kind for key, store in executor.stores.items()}
    return donation.donations(program.sdg, program.ast, kinds, {n for n, _ in program.fetch})


def test_the_last_reader_of_a_freed_point_donates_it():
    program, z = _chain(fetch_middle=False)
    donated = _donations(program)
    assert donated, "some launch is the last reader of a point freed right after it"
    for n, inputs in donated.items():
        edges = program.sdg.in_edges(n)
        assert all(edges[k].src not in {f for f, _ in program.fetch} for k in inputs)


def test_a_fetched_value_is_never_donated():
    program, _ = _chain(fetch_middle=True)
    fetched = {n for n, _ in program.fetch}
    for n, inputs in _donations(program).items():
        assert not {program.sdg.in_edges(n)[k].src for k in inputs} & fetched


@pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")
def test_donating_kernels_compute_numpys_values():
    program, _ = _chain(fetch_middle=False)
    expected = program.run({"T": 4})
    program.backend = base.get_backend("jax")
    assert _donations(program, "jax")
    got = program.run({"T": 4})
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-6)
