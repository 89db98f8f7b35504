"""Backend parity: the differential, gradient and checkpoint tests, run on torch and JAX.

The tests of ``tests/api/test_differential.py``, ``test_autodiff.py`` and
``test_checkpoint.py`` are imported and run with every compile switched to
the backend under test, so each backend is checked against the same NumPy
loops, finite differences and torch.autograd references as the NumPy
backend, at those tests' own tolerances (float64 programs: rtol 1e-6). Two
things are relaxed: the differential helper runs each program with the
stores its reads call for and with point stores only, and on these backends
the two may differ in the last bit (a reduction over a view sums in another
order than over a stacked copy), so they are compared at rtol 1e-12 instead
of exactly.

The RL examples (REINFORCE and A2C on gymnasium's CartPole, PPO on the
tensor ``tempo/Synthetic-v0``) train a few iterations on each backend and
must report NumPy's mean returns (rtol 1e-4).

The default suite runs one parametrisation of each imported test (the last
one: the largest bound); ``-m slow`` runs them all.
"""
from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys

import numpy as np
import pytest

import tempo.api.compile as compile_mod
from tempo.runtime.backends import base

BACKENDS = [b for b in ("torch", "jax") if b in base.available_backends()]
API_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"parity_{name}", os.path.join(API_TESTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(module) -> list:
    """``(test name, kwargs, is the default case)`` for every parametrisation of every test in ``module``."""
    out = []
    for name, fn in vars(module).items():
        if not (name.startswith("test_") and callable(fn)):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        grids = []
        for mark in marks:
            names = [n.strip() for n in (mark.args[0].split(",") if isinstance(mark.args[0], str) else mark.args[0])]
            values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
            grids.append([dict(zip(names, v)) for v in values])
        combos = [dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*grids)]
        for k, kwargs in enumerate(combos):
            out.append((name, kwargs, k == len(combos) - 1))
    return out


DIFFERENTIAL = _load("test_differential")
AUTODIFF = _load("test_autodiff")
CHECKPOINT = _load("test_checkpoint")


def _params(module, prefix: str):
    return [pytest.param(backend, name, kwargs, id=f"{backend}-{prefix}{name[5:]}"
                         + "".join(f"-{v}" for v in kwargs.values()),
                         marks=() if default else pytest.mark.slow)
            for backend in BACKENDS for name, kwargs, default in _cases(module)]


@pytest.fixture
def on_backend(monkeypatch):
    """Switch every compile of the test to a backend."""
    def use(name: str):
        real = base.get_backend
        monkeypatch.setattr(compile_mod, "get_backend", lambda _name=None, site=None: real(name, site))

    return use


def _call(fn, kwargs, request, backend: str):
    """Run the test ``fn``; one that runs no program is backend-independent and skipped."""
    params = inspect.signature(fn).parameters
    fixtures = {p: request.getfixturevalue(p) for p in params if p not in kwargs}
    ran = []
    real_run = compile_mod.Program.run

    def run(program, *args, **kw):
        assert program.backend.name == backend
        ran.append(program)
        return real_run(program, *args, **kw)

    request.getfixturevalue("monkeypatch").setattr(compile_mod.Program, "run", run)
    fn(**kwargs, **fixtures)
    if not ran:
        pytest.skip("runs no program: the same on every backend")


def _close_run(ctx, bounds, *fetch):
    """The differential helper, with chosen and point stores compared at rtol 1e-12."""
    program = ctx.compile(fetch=list(fetch))
    out = program.run(bounds)
    for chosen, point in zip(out, program.run(bounds, stores="point")):
        np.testing.assert_allclose(chosen, point, rtol=1e-12, atol=1e-14, equal_nan=True)
    assert len(out) == len(fetch)
    return [np.asarray(o) for o in out]


@pytest.mark.parametrize("backend,name,kwargs", _params(DIFFERENTIAL, "differential"))
def test_differential_program(backend, name, kwargs, on_backend, monkeypatch, request):
    on_backend(backend)
    monkeypatch.setattr(DIFFERENTIAL, "run", _close_run)
    _call(getattr(DIFFERENTIAL, name), kwargs, request, backend)


@pytest.mark.parametrize("backend,name,kwargs", _params(AUTODIFF, "autodiff"))
def test_gradients(backend, name, kwargs, on_backend, request):
    on_backend(backend)
    _call(getattr(AUTODIFF, name), kwargs, request, backend)


@pytest.mark.parametrize("backend,name,kwargs", _params(CHECKPOINT, "checkpoint"))
def test_checkpoint(backend, name, kwargs, on_backend, request):
    on_backend(backend)
    _call(getattr(CHECKPOINT, name), kwargs, request, backend)


def _example(name: str):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(f"parity_example_{name}",
                                                  os.path.join(root, "examples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


RL_CASES = {
    "reinforce-gymnasium": ("reinforce", dict(iterations=3, batch=8, steps=40)),
    "ppo-tensor": ("ppo_fixed_horizon", dict(iterations=3, epochs=2, batch=16, steps=30, env="tempo/Synthetic-v0", impl="tensor",
                               obs_shape="3,4,4")),
    "a2c-gymnasium": ("a2c", dict(iterations=3, batch=8, steps=30, nstep=4)),
}
NUMPY_RETURNS: dict[str, list] = {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(RL_CASES))
def test_rl_example_returns_match_numpy(case, backend, capsys):
    """A few training iterations give NumPy's mean returns: the same actions are sampled from the
    same random bits, and float32 rounding differences (rtol 1e-4 on the returns) never flip one."""
    name, fields = RL_CASES[case]
    module = _example(name)
    if case not in NUMPY_RETURNS:
        NUMPY_RETURNS[case] = module.main(module.Args(backend="numpy", **fields))["returns"]
    expected = NUMPY_RETURNS[case]
    got = module.main(module.Args(backend=backend, **fields))["returns"]
    assert got == pytest.approx(expected, rel=1e-4)
