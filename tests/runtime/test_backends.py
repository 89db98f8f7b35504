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
    with pytest.raises(TempoError, match=r"unknown backend 'tensorflow'; available: numpy, jax, torch"):
        get_backend("tensorflow")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Installs a distribution in ``tmp_path`` whose entry points declare the backends given as
    ``{name: module source}`` (each module defines ``Backend``), as a package of a user's would."""

    def install(modules: dict[str, str]) -> None:
        info = tmp_path / "tempo_plugin-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tempo-plugin\nVersion: 1.0\n")
        lines = [f"{name} = tempo_plugin_{name}:Backend" for name in modules]
        (info / "entry_points.txt").write_text("[tempo.backends]\n" + "\n".join(lines) + "\n")
        for name, source in modules.items():
            (tmp_path / f"tempo_plugin_{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        base._declared.cache_clear()
        base._load.cache_clear()

    yield install
    base._declared.cache_clear()
    base._load.cache_clear()


def test_a_package_registers_a_backend_with_an_entry_point(plugin):
    plugin({"doubled": "from tempo.runtime.backends.numpy import NumPyBackend\n"
                       "class Backend(NumPyBackend):\n    name = 'doubled'\n"})
    assert "doubled" in base.available_backends()
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(4.0), dims=(t,))
        program = ctx.compile(fetch=[x * 2.0], backend="doubled")
    assert program.backend.name == "doubled"
    np.testing.assert_array_equal(program.run({T: 4})[0], np.arange(4.0) * 2)


def test_a_missing_package_says_what_to_install(plugin):
    plugin({"absent": "import tempo_no_such_package\nBackend = None\n"})
    assert "absent" not in base.available_backends()
    with pytest.raises(TempoError, match=r"the absent backend needs the 'tempo_no_such_package' "
                                         r"package, which is not installed: pip install"):
        get_backend("absent")


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


def test_built_in_backends_are_declared_without_package_metadata(monkeypatch):
    """Tempo run from its source tree (on ``PYTHONPATH``, not installed) still has its own backends."""
    monkeypatch.setattr(base, "entry_points", lambda group: [])
    base._declared.cache_clear()
    base._load.cache_clear()
    try:
        assert list(base._declared()) == ["numpy", "jax", "torch"]
        assert base.get_backend("numpy").name == "numpy"
    finally:
        base._declared.cache_clear()
        base._load.cache_clear()
