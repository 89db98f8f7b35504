"""A dying instance is reported with its roles and exit cause; the rest stop; the checkpoint survives."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tempo.gmi import checkpoint
from tempo.gmi.errors import InstanceFailure
from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.roles import Role


def wait_for(path: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_killed_instance_is_named_and_the_checkpoint_survives(tmp_path):
    run_dir = str(tmp_path / "run")
    train = subprocess.Popen(
        [sys.executable, "-m", "tempo", "gmi", "train", "--env", "CartPole-v1", "--layout", "1x2",
         "--strategy", "mpr", "--seconds", "120", "--num-envs", "4", "--checkpoint-every", "1",
         "--run-dir", run_dir],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(os.path.join(run_dir, checkpoint.CHECKPOINT), 90)
        with open(os.path.join(run_dir, "instances.json")) as handle:
            instances = json.load(handle)
        victim = instances[1]
        os.kill(victim["pid"], signal.SIGKILL)
        out, err = train.communicate(timeout=60)
    finally:
        train.kill()
    assert train.returncode == 1
    assert ("instance 1 (simulator+agent+trainer, ppo, device 0) died: killed by SIGKILL"
            in err), err
    assert "Traceback" not in err
    assert "layout 1x2 (TCG_EX, 2 instances, cpu backend), strategy mpr" in out
    assert "steps/s=" in out and "mean return=" in out
    assert not any(alive(instance["pid"]) for instance in instances)
    state = checkpoint.load(run_dir)
    assert state["iteration"] >= 1
    assert all(torch.isfinite(v).all() for v in state["policy"].values())


class Boom(Role):
    """Instance 1 raises; instance 0 waits for a message that never comes."""

    def run(self) -> None:
        if self.gmi_id == 1:
            raise ValueError("bad batch 7")
        self.recv(torch.empty(1), src=1)


@pytest.mark.slow
def test_an_exception_is_the_exit_cause(tmp_path):
    program = Program(Boom, ("trainer",))
    manager = GMIManager(Layout.parse("1x2"), [program, program], run_dir=str(tmp_path))
    with pytest.raises(InstanceFailure) as failure:
        manager.run()
    first_line = str(failure.value).splitlines()[0]
    assert first_line.startswith("instance 1 (trainer, Boom, device 0) died: ValueError: bad batch 7")
