"""benchmarks/rl_learning.py: learning curves of the Tempo PPO examples and the CleanRL-style loop."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rl_learning", ROOT / "benchmarks" / "rl_learning.py")
rl_learning = sys.modules["rl_learning"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rl_learning)


def test_curve_is_the_mean_of_the_last_episodes_finished_by_each_point():
    episodes = [[10, 1.0, 1, 0.1], [20, 3.0, 1, 0.2], [40, 5.0, 1, 0.4]]
    got = rl_learning.curve(episodes, np.array([5, 10, 30, 40]), 0, window=2)
    np.testing.assert_array_equal(got[1:], [1.0, 2.0, 4.0])
    assert np.isnan(got[0])


def run(system: str, seed: int, returns: list[float]) -> dict:
    steps = 100
    episodes = [[10 * (k + 1), r, 1, float(k)] for k, r in enumerate(returns)]
    return {"system": system, "env": "CartPole-v1", "seed": seed, "steps": steps, "episodes": episodes,
            "global_step": steps, "process_wall_s": 2.0, "process_cpu_s": 1.0, "sps": 50.0}


def test_summary_checks_tempo_against_the_baselines_spread():
    runs = [run("cleanrl", 1, [0.0] * 10), run("cleanrl", 2, [10.0] * 10), run("tempo", 1, [5.0] * 10),
            run("tempo", 2, [5.0] * 9 + [500.0])]
    summary = rl_learning.summarise(runs, "CartPole-v1", 475.0)
    assert summary["tempo_within_baseline_spread"] == [True] * 9 + [False]
    assert summary["tempo"]["sps_cpu"] == [100.0, 100.0] and summary["tempo"]["sps_wall"] == [50.0, 50.0]
    assert summary["tempo"]["steps_to_target"] == [None, None]
    assert summary["cleanrl"]["final_return"] == [0.0, 10.0]


@pytest.mark.slow
def test_a_reduced_run_writes_its_json_and_plot(tmp_path):
    out = tmp_path / "learning"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_learning.py"), "--envs", "CartPole-v1",
                           "--seeds", "1", "--scale", "0.004", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert {r["system"] for r in report["runs"]} == {"tempo", "cleanrl"}
    assert all(r["global_step"] == 1536 and r["episodes"] for r in report["runs"])
    assert out.with_suffix(".png").stat().st_size > 0
