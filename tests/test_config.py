"""tpo.Config: the compiler's settings, passed in code or seeded by the TEMPO_* environment variables."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.config import Config


def _program(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.arange(6.0), dims=(t,))
    return (x * 2.0 + 1.0) * 1.0


def test_the_environment_seeds_the_config(monkeypatch):
    monkeypatch.setenv("TEMPO_PASSES_OFF", "cse, dce")
    monkeypatch.setenv("TEMPO_TILES", "t:3,l:2")
    monkeypatch.setenv("TEMPO_VERIFY", "0")
    monkeypatch.setenv("TEMPO_BACKEND", "torch")
    config = Config.from_env()
    assert config == Config(passes_off=("cse", "dce"), tiles={"t": 3, "l": 2}, verify=False, backend="torch")
    assert Config.from_env({}) == Config()


def test_a_config_in_code_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("TEMPO_PASSES_OFF", "cse,dce")
    with tpo.Context() as ctx:
        y = _program(ctx)
        from_env = ctx.compile([y])
        in_code = ctx.compile([y], config=Config(passes_off=("simplify",)))
    assert {"cse", "dce"}.isdisjoint(s.name for s in from_env.pass_stats)
    ran = {s.name for s in in_code.pass_stats}
    assert {"cse", "dce"} <= ran and "simplify" not in ran
    np.testing.assert_array_equal(in_code.run({"T": 6})[0], from_env.run({"T": 6})[0])


def test_the_config_names_the_backend_of_runs_that_name_none(monkeypatch):
    monkeypatch.delenv("TEMPO_BACKEND", raising=False)
    with tpo.Context() as ctx:
        y = _program(ctx)
        out, = ctx.run({"T": 6}, fetch=[y], config=Config(backend="torch"))
        assert ctx.compile([y], config=Config(backend="torch")).backend.name == "torch"
        assert ctx.compile([y], backend="numpy", config=Config(backend="torch")).backend.name == "numpy"
    np.testing.assert_array_equal(out, np.arange(6.0) * 2 + 1)


def test_a_misspelt_pass_is_named_as_the_user_spelled_it(monkeypatch):
    with tpo.Context() as ctx:
        y = _program(ctx)
        with pytest.raises(tpo.TempoError, match=r"Config\(passes_off=...\) names 'lfit'"):
            ctx.compile([y], config=Config(passes_off=("lfit",)))
        monkeypatch.setenv("TEMPO_PASSES_OFF", "lfit")
        with pytest.raises(tpo.TempoError, match="TEMPO_PASSES_OFF names 'lfit'"):
            ctx.compile([y])


def test_verify_in_code_checks_every_pass(monkeypatch):
    import tempo.transforms as transforms

    checked = []
    monkeypatch.setattr(transforms, "verify_sdg", lambda sdg, dims, after=None: checked.append(after))
    with tpo.Context() as ctx:
        y = _program(ctx)
        ctx.compile([y], config=Config(verify=False))
        assert checked == []
        ctx.compile([y], config=Config(verify=True))
    assert checked[0] is None and "fuse" in checked
