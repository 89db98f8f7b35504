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


def train(iterations: int, path: str | None = None, resume_from: str | None = None):
    with tpo.Context(seed=0) as ctx:
        (i, I), = ctx.dims("i")
        model = tpo.nn.MLP(3, [4], 1, dims=(i,))
        loss = ((model(tpo.from_numpy(X)).squeeze(1) - tpo.from_numpy(Y)) ** 2.0).mean()
        loss.backward()
        opt = tpo.optim.Adam(model.parameters(), lr=0.05)
        opt.step()
        if path is not None:
            tpo.checkpoint(opt.state_dict(), path, when=(i + 1) % 4 == 0)
        if resume_from is not None:
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
