"""The backend registry: every backend covers every op type, and unavailable choices are clear errors."""
from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir import ops
from tempo.runtime.backends import base, get_backend

OP_TYPES = [t for _, t in inspect.getmembers(ops, inspect.isclass)
            if issubclass(t, ops.Op) and t is not ops.Op and t.__module__ == ops.__name__]


@pytest.mark.parametrize("name", base.available_backends())
def test_every_op_type_has_a_kernel_on_every_backend(name):
    backend = get_backend(name)
    missing = [t.__name__ for t in OP_TYPES if t is not ops.MergeOp and not backend.covers(t)]
    assert not missing, f"the {name} backend has no kernel for {', '.join(missing)}"


def test_available_backends_lists_the_installed_ones():
    assert base.available_backends()[0] == "numpy"
    assert {"torch", "jax"} <= set(base.available_backends())  # installed with the test extras


def test_an_unknown_backend_names_the_available_ones():
    with pytest.raises(TempoError, match=r"unknown backend 'tensorflow'; available: numpy, torch, jax"):
        get_backend("tensorflow")


def test_a_missing_package_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(TempoError, match=r"needs the 'jax' package, which is not installed: pip install"):
        get_backend("jax")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_cuda_without_a_gpu_is_an_error_naming_the_choices():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(TempoError, match=r"torch sees no CUDA GPU here; use backend='torch'"):
        get_backend("torch:cuda")


def test_jax_without_a_gpu_is_an_error():
    import jax

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU")
    with pytest.raises(TempoError, match=r"jax backend: no 'gpu' device here"):
        get_backend("jax:gpu")


def test_numpy_runs_on_the_cpu_only():
    with pytest.raises(TempoError, match="numpy backend runs on the CPU only"):
        get_backend("numpy:cuda")


def test_the_default_backend_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("TEMPO_BACKEND", "torch")
    assert get_backend().name == "torch"
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(4.0), dims=(t,))
        program = ctx.compile(fetch=[x * 2.0])
    assert program.backend.name == "torch"
    np.testing.assert_array_equal(program.run({T: 4})[0], np.arange(4.0) * 2)
    monkeypatch.delenv("TEMPO_BACKEND")
    assert get_backend().name == "numpy"


def test_a_bad_backend_in_run_names_the_users_line():
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(4.0), dims=(t,))
        with pytest.raises(TempoError, match="unknown backend 'cupy'") as info:
            ctx.run({T: 4}, fetch=[x], backend="cupy")
    assert info.value.site is not None and "test_backends.py" in info.value.site.filename
