"""Checkpoints: atomic safetensors writes from a program, and resuming that equals not stopping."""
from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import tempo as tpo
from tempo.api import checkpoint as ckpt_mod

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 3)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3).astype(np.float32)


def train(iterations: int, path: str | None = None, resume_from: str | None = None, resume_first: bool = False,
          start: int = 0):
    with tpo.Context(seed=0, start={"i": start}) as ctx:
        (i, I), = ctx.dims("i")
        model = tpo.nn.MLP(3, [4], 1, dims=(i,))
        loss = ((model(tpo.from_numpy(X)).squeeze(1) - tpo.from_numpy(Y)) ** 2.0).mean()
        loss.backward()
        opt = tpo.optim.Adam(model.parameters(), lr=0.05)
        if resume_from is not None and resume_first:
            opt.resume(tpo.load_checkpoint(resume_from))
        opt.step()
        if path is not None:
            tpo.checkpoint(opt.state_dict(), path, when=(i + start + 1) % 4 == 0)
        if resume_from is not None and not resume_first:
            opt.resume(tpo.load_checkpoint(resume_from))
        losses, = ctx.run({I: iterations}, fetch=[loss])
    return losses


def test_resuming_from_a_checkpoint_continues_exactly(tmp_path):
    path = str(tmp_path / "ckpt-{i}.safetensors")
    full = train(8, path)
    saved = tpo.load_checkpoint(str(tmp_path / "ckpt-3.safetensors"))
    assert saved.point == {"i": 3}
    names = {f"{k}.Linear.{w}{s}" for k, w in enumerate(["weight", "bias"] * 2) for s in ("", "/m", "/v", "/step")}
    assert set(saved.tensors) == names
    resumed = train(4, resume_from=str(tmp_path / "ckpt-3.safetensors"))
    np.testing.assert_allclose(resumed, full[4:], rtol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-3.safetensors", "ckpt-7.safetensors"]


def test_resume_before_step_continues_like_resume_after_step(tmp_path):
    full = train(8, str(tmp_path / "ckpt-{i}.safetensors"))
    first = str(tmp_path / "ckpt-3.safetensors")
    np.testing.assert_allclose(train(4, resume_from=first, resume_first=True), full[4:], rtol=1e-6)
    assert not np.allclose(train(4)[:1], full[4:5])  # fresh weights would start elsewhere


def test_a_resumed_run_names_its_checkpoints_by_the_global_iteration(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    full = train(8, str(first / "ckpt-{i}.safetensors"))
    resumed = train(8, str(second / "ckpt-{i}.safetensors"), resume_from=str(first / "ckpt-3.safetensors"), start=4)
    assert sorted(os.listdir(second)) == ["ckpt-11.safetensors", "ckpt-7.safetensors"]
    assert tpo.load_checkpoint(str(second / "ckpt-7.safetensors")).point == {"i": 7}
    np.testing.assert_allclose(resumed[:4], full[4:], rtol=1e-6)
    np.testing.assert_allclose(tpo.load_checkpoint(str(second / "ckpt-7.safetensors")).tensors["0.Linear.weight"],
                               tpo.load_checkpoint(str(first / "ckpt-7.safetensors")).tensors["0.Linear.weight"],
                               rtol=1e-6)


def test_checkpoint_files_get_the_mode_of_a_plain_open(tmp_path):
    old = os.umask(0o022)
    try:
        with tpo.Context() as ctx:
            (i, I), = ctx.dims("i")
            tpo.eval_symbol(i).cast("float32").checkpoint(str(tmp_path / "x-{i}.safetensors"))
            ctx.run({I: 1})
        assert os.stat(tmp_path / "x-0.safetensors").st_mode & 0o777 == 0o644
        os.umask(0o077)
        ckpt_mod.write_atomic(str(tmp_path / "private.safetensors"), {"w": np.zeros(1)}, {})
        assert os.stat(tmp_path / "private.safetensors").st_mode & 0o777 == 0o600
        os.chmod(tmp_path / "x-0.safetensors", 0o640)
        ckpt_mod.write_atomic(str(tmp_path / "x-0.safetensors"), {"w": np.zeros(1)}, {})
        assert os.stat(tmp_path / "x-0.safetensors").st_mode & 0o777 == 0o640  # a replaced file keeps its mode
    finally:
        os.umask(old)


def test_rt_checkpoint_writes_where_the_condition_holds(tmp_path):
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        x = tpo.eval_symbol(i).cast("float32") * 2.0
        x[(i + 1) % 5 == 0].checkpoint(str(tmp_path / "x-{i}.safetensors"), name="x")
        ctx.run({I: 10})
    assert sorted(os.listdir(tmp_path)) == ["x-4.safetensors", "x-9.safetensors"]
    assert float(load_file(str(tmp_path / "x-9.safetensors"))["x"]) == 18.0


def test_a_checkpoint_path_that_is_not_writable_is_an_error(tmp_path):
    with tpo.Context():
        x = tpo.from_numpy(np.ones(2, np.float32))
        with pytest.raises(tpo.TempoError, match="does not exist") as info:
            tpo.checkpoint({"x": x}, str(tmp_path / "missing" / "c.safetensors"))
    assert "tpo.checkpoint(" in str(info.value)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):
        pytest.skip("running as a user who can write anywhere")
    with tpo.Context():
        with pytest.raises(tpo.TempoError, match="not writable"):
            tpo.checkpoint({"x": tpo.from_numpy(np.ones(2))}, str(locked / "c.safetensors"))


def test_a_failed_write_leaves_the_old_checkpoint_and_no_partial_file(tmp_path, monkeypatch):
    path = str(tmp_path / "c.safetensors")
    ckpt_mod.write_atomic(path, {"w": np.arange(3.0)}, {})

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_mod.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        ckpt_mod.write_atomic(path, {"w": np.zeros(1000)}, {})
    assert os.listdir(tmp_path) == ["c.safetensors"]
    np.testing.assert_array_equal(load_file(path)["w"], np.arange(3.0))
