"""examples/ppo.py as a CleanRL user runs it: flags, TensorBoard files, the saved policy and its evaluation."""
from __future__ import annotations

import os
import runpy
import struct
from pathlib import Path

import numpy as np
import pytest

import tempo as tpo
from tempo.rl.evaluate import main as evaluate_main
from tempo.rl.tensorboard import crc32c, masked_crc

ROOT = Path(__file__).resolve().parents[2]
CLEANRL_TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/value_loss",
                "losses/policy_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac"}


def bitwise_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def fields(buf: bytes):
    """(field number, value) pairs of a protocol buffer message (varint, 64-bit, bytes, 32-bit)."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            size, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        yield number, value


def scalars(path: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in an event file, checking the TFRecord framing's checksums."""
    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,), (crc,) = struct.unpack("<Q", header), struct.unpack("<I", data[pos + 8:pos + 12])
        assert crc == masked_crc(header)
        payload = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc(payload)
        pos += 16 + length
        event = dict(fields(payload))
        for number, summary in fields(payload):
            if number != 5:
                continue
            for _, value in fields(summary):
                v = dict(fields(value))
                out.append((v[1].decode(), event.get(2, 0), struct.unpack("<f", v[2])[0]))
    return out


def test_crc32c_matches_the_bitwise_definition():
    assert crc32c(b"123456789") == 0xE3069283 == bitwise_crc32c(b"123456789")
    blob = bytes(range(256)) * 3
    assert crc32c(blob) == bitwise_crc32c(blob)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short run of examples/ppo.py with --save-model, in its own directory."""
    root = tmp_path_factory.mktemp("ppo")
    ppo = runpy.run_path(str(ROOT / "examples" / "ppo.py"), run_name="ppo_example")
    args = ppo["Args"](total_timesteps=1024, num_envs=4, num_steps=64, save_model=True, seed=2)
    cwd = Path.cwd()
    try:
        os.chdir(root)
        summary = ppo["main"](args)
    finally:
        os.chdir(cwd)
    return root, summary


def test_the_run_writes_cleanrls_tensorboard_tags(trained):
    root, summary = trained
    files = list((root / "runs").glob("CartPole-v1__ppo__2__*/events.out.tfevents.*"))
    assert len(files) == 1
    logged = scalars(files[0])
    assert CLEANRL_TAGS <= {tag for tag, _, _ in logged}
    returns = [(step, value) for tag, step, value in logged if tag == "charts/episodic_return"]
    assert [list(r) for r in returns] == [[e[0], pytest.approx(e[1])] for e in summary["episodes"]]
    sps_steps = [step for tag, step, _ in logged if tag == "charts/SPS"]
    assert sps_steps == [256, 512, 768, 1024]  # once per rollout of 4 envs x 64 steps
    assert summary["global_step"] == 1024


def test_the_saved_policy_evaluates(trained, capsys):
    root, _ = trained
    path = next((root / "runs").glob("CartPole-v1__ppo__2__*/ppo.safetensors"))
    greedy = tpo.rl.evaluate(str(path), "CartPole-v1", episodes=3)
    assert len(greedy) == 3 and all(r >= 1 for r in greedy)
    assert greedy == tpo.rl.evaluate(str(path), "CartPole-v1", episodes=3)
    sampled = tpo.rl.evaluate(str(path), "CartPole-v1", episodes=3, deterministic=False, seed=4)
    assert sampled == tpo.rl.evaluate(str(path), "CartPole-v1", episodes=3, deterministic=False, seed=4)
    assert evaluate_main(["evaluate", str(path), "--env-id", "CartPole-v1", "--episodes", "3"]) == 0
    assert f"mean_return={np.mean(greedy):.2f} episodes=3" in capsys.readouterr().out
    with pytest.raises(tpo.TempoError, match="observation values"):
        tpo.rl.evaluate(str(path), "Acrobot-v1", episodes=1)


def test_evaluate_names_a_file_without_an_actor(tmp_path):
    from tempo.api.checkpoint import write_atomic

    path = tmp_path / "other.safetensors"
    write_atomic(str(path), {"w": np.zeros(3, np.float32)}, {})
    with pytest.raises(tpo.TempoError, match="no actor"):
        tpo.rl.evaluate(str(path), "CartPole-v1")
