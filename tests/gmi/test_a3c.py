"""Asynchronous A3C: channel batching, least-loaded routing, and an end-to-end run."""
from __future__ import annotations

import pytest
import torch

from tempo.gmi import checkpoint
from tempo.gmi.channels import CHANNELS, Compressor, Dispenser, LoadTable
from tempo.gmi.layout import Layout
from tempo.gmi.ppo import PPOConfig
from tempo.gmi.train_run import TrainJob, a3c_split, train


def test_dispenser_and_compressor_batch_each_channel():
    dispenser, compressor = Dispenser(), Compressor(rows=10)
    rollouts = [{"obs": torch.full((4, 3), float(i)), "actions": torch.full((4,), i),
                 "returns": torch.full((4,), i / 2), "logp": torch.zeros(4)} for i in range(3)]
    for rollout in rollouts[:2]:
        compressor.push(dispenser.split(rollout))
    assert compressor.pending == 8 and not compressor.ready()
    compressor.push(dispenser.split(rollouts[2]))
    batch = compressor.flush()
    assert set(batch) == set(CHANNELS) and compressor.pending == 0
    assert batch["obs"].shape == (12, 3) and batch["actions"].dtype == torch.int64
    assert batch["actions"].tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_trainers_take_the_last_device():
    assert a3c_split(Layout.parse("2,2")) == ([0, 1], [2, 3])
    assert a3c_split(Layout.parse("1x3")) == ([0, 1], [2])


def test_migrator_routes_to_the_least_loaded_trainer():
    table = LoadTable([0, 1], [2, 3, 4], torch.zeros(2, 3), torch.zeros(3, 2))
    assert table.least_loaded() == 0
    table.sent[0, 0] += 2
    table.sent[1, 1] += 1
    assert table.least_loaded() == 2
    table.sent[1, 2] += 3
    table.done[0, 0] += 2          # trainer 2 finished both of agent 0's batches
    assert table.outstanding().tolist() == [0.0, 1.0, 3.0] and table.least_loaded() == 0


def test_agent_feeds_trainer_and_every_batch_is_trained(tmp_path):
    cfg = PPOConfig(num_envs=4, num_steps=8, hidden=(32, 32))
    job = TrainJob(Layout.parse("2x1"), "a3c", seconds=3.0, config=cfg, run_dir=str(tmp_path))
    summary = train(job, echo=lambda line: None)
    rows = 2 * cfg.num_envs * cfg.num_steps
    assert summary["steps"] > 0 and summary["trained_samples"] > 0
    assert summary["trained_samples"] % rows == 0
    # the agent only holds back a partial batch
    assert 0 <= summary["steps"] - summary["trained_samples"] < rows
    assert checkpoint.load(str(tmp_path))["iteration"] == summary["trained_samples"] // rows


@pytest.mark.slow
def test_two_agents_two_trainers(tmp_path):
    cfg = PPOConfig(num_envs=4, num_steps=8, hidden=(32, 32))
    summary = train(TrainJob(Layout.parse("2,2"), "a3c", seconds=5.0, config=cfg,
                             run_dir=str(tmp_path)), echo=lambda line: None)
    assert summary["trainers_used"] == 2 and summary["trained_samples"] > 0
