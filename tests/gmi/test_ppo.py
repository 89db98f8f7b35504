"""Synchronous PPO: N instances equal one process over the union of their data."""
from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from tempo.gmi import checkpoint
from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.ppo import PPOConfig, Shard, gae, train_reference

torch.set_num_threads(1)  # the instances use one thread each; so does the reference here
SMALL = PPOConfig(num_envs=4, num_steps=16, hidden=(32, 32), seed=5)


def run_instances(layout: str, strategy: str, iterations: int, tmp_path) -> torch.Tensor:
    parsed = Layout.parse(layout)
    program = Program("ppo", ("simulator", "agent", "trainer"),
                      {"config": asdict(SMALL), "strategy": strategy, "iterations": iterations})
    manager = GMIManager(parsed, [program] * parsed.world_size, run_dir=str(tmp_path))
    events = manager.run()
    assert sum(e["kind"] == "progress" for e in events) == iterations * parsed.world_size
    state = checkpoint.load(str(tmp_path))
    assert state["iteration"] == iterations
    return torch.cat([v.reshape(-1) for v in state["policy"].values()])


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_three_uneven_instances_equal_one_process_over_the_union(tmp_path):
    got = run_instances("2,1", "har", 3, tmp_path)
    union = train_reference(SMALL, shards=3, iterations=3)
    assert rel_error(got, union) <= 1e-5
    # the comparison can fail: one shard's data alone trains a different policy
    assert rel_error(train_reference(SMALL, shards=1, iterations=3), union) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("layout, strategy", [("2x1", "mrr"), ("1x3", "mpr"), ("2x2", "mrr")])
def test_equivalence_on_more_layouts(layout, strategy, tmp_path):
    n = Layout.parse(layout).world_size
    got = run_instances(layout, strategy, 2, tmp_path)
    assert rel_error(got, train_reference(SMALL, shards=n, iterations=2)) <= 1e-5


def test_gae_matches_a_direct_sum_without_dones():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [0.25], [0.0]])
    gamma, lam = 0.9, 0.8
    adv = gae(rewards, values, torch.zeros_like(rewards), torch.tensor([1.0]), gamma, lam)
    nxt = torch.cat([values[1:, 0], torch.tensor([1.0])])
    deltas = rewards[:, 0] + gamma * nxt - values[:, 0]
    expected = [sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, 3)) for t in range(3)]
    assert torch.allclose(adv[:, 0], torch.stack(expected))


def test_shards_draw_different_experience():
    a, b = Shard(SMALL, 0), Shard(SMALL, 1)
    assert not torch.equal(a.obs, b.obs)
