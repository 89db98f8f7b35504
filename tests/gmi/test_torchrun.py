"""``tempo gmi train`` as the workers of a torchrun job."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tempo.gmi import checkpoint


@pytest.mark.slow
def test_torchrun_workers_are_the_instances(tmp_path):
    run_dir = str(tmp_path / "run")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "tempo", "gmi", "train", "--layout", "2x1", "--seconds", "3", "--num-envs", "4",
         "--run-dir", run_dir],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "layout 2x1 (TCG_EX, 2 torchrun workers), strategy mrr" in done.stdout
    assert done.stdout.count("done: checkpoint in") == 1
    assert checkpoint.load(run_dir)["iteration"] >= 1


@pytest.mark.slow
def test_torchrun_world_must_match_the_layout(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "tempo", "gmi", "train", "--layout", "1x3", "--seconds", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode != 0
    assert "torchrun started 2 workers but layout 1x3 has 3 instances" in done.stderr


@pytest.mark.slow
def test_two_torchrun_nodes_reduce_hierarchically(tmp_path):
    """Two torchrun launchers (nodes) of two workers each: a device per node, HAR across them."""
    port = 29000 + os.getpid() % 1000
    launchers = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
         "-m", "tempo", "gmi", "train", "--layout", "2x2", "--strategy", "har", "--seconds", "3",
         "--num-envs", "4", "--run-dir", str(tmp_path / f"node{node}")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path) for node in (0, 1)]
    outputs = [launcher.communicate(timeout=300) for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs
    stdout = "".join(out for out, _ in outputs)
    assert "layout 2x2 (TCG_EX, 4 torchrun workers), strategy har" in stdout
    assert stdout.count("done: checkpoint in") == 1  # worker 0 reports, on whichever node it runs
    run_dir = next(tmp_path / f"node{n}" for n in (0, 1) if (tmp_path / f"node{n}" / "checkpoint.pt").exists())
    assert checkpoint.load(str(run_dir))["iteration"] >= 1
