"""benchmarks/rl_learning.py: learning curves of the Tempo PPO examples, the CleanRL-style loop and SB3."""
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
    episodes = [[10 * (k + 1), r, 1, float(k), 0.5 * k] for k, r in enumerate(returns)]
    return {"system": system, "env": "CartPole-v1", "seed": seed, "steps": steps, "episodes": episodes,
            "global_step": steps, "process_wall_s": 2.0, "process_cpu_s": 1.0, "sps": 50.0, "cpu_seconds": 0.8}


def test_summary_checks_tempo_against_the_baselines_spread():
    runs = [run("cleanrl", 1, [0.0] * 10), run("cleanrl", 2, [10.0] * 10), run("tempo", 1, [5.0] * 10),
            run("tempo", 2, [5.0] * 9 + [500.0])]
    summary = rl_learning.summarise(runs, "CartPole-v1", 475.0)
    assert summary["tempo_within_cleanrl_spread"] == [True] * 9 + [False]
    assert "tempo_within_sb3_spread" not in summary
    assert summary["tempo"]["sps_cpu"] == [100.0, 100.0] and summary["tempo"]["sps_wall"] == [50.0, 50.0]
    assert summary["tempo"]["sps_cpu_in_run"] == [125.0, 125.0]
    assert summary["tempo"]["steps_to_target"] == [None, None]
    assert summary["cleanrl"]["final_return"] == [0.0, 10.0]


def test_steps_and_cpu_seconds_to_target_are_where_the_20_episode_mean_first_reaches_it():
    runs = [run("sb3", 1, [0.0] * 19 + [500.0] * 20), run("tempo", 1, [500.0] * 39)]
    summary = rl_learning.summarise(runs, "CartPole-v1", 475.0)
    # the mean of the last 20 reaches 475 once 19 of them are 500: episode 38 (0-based 37)
    assert summary["sb3"]["steps_to_target"] == [380] and summary["sb3"]["cpu_s_to_target"] == [18.5]
    assert summary["tempo"]["steps_to_target"] == [10] and summary["tempo"]["cpu_s_to_target"] == [0.0]
    assert summary["tempo_within_sb3_spread"] == [False] * 10  # sb3 is at 0 until step 190
    rows = rl_learning.table({"CartPole-v1": summary}).splitlines()
    assert rows[2].startswith("| CartPole-v1 | tempo | 1 | 500.0 | 0k | 0.0 |")
    assert rows[3].startswith("| CartPole-v1 | sb3 | 1 | 0.0 | 0k | 18.5 |")


@pytest.mark.slow
def test_a_reduced_run_writes_its_json_and_plot(tmp_path):
    out = tmp_path / "learning"
    pytest.importorskip("stable_baselines3")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_learning.py"), "--envs", "CartPole-v1",
                           "--seeds", "1", "--scale", "0.004", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert {r["system"] for r in report["runs"]} == {"tempo", "cleanrl", "sb3"}
    assert all(r["global_step"] == 1536 and r["episodes"] for r in report["runs"])
    assert out.with_suffix(".png").stat().st_size > 0


def test_reuse_takes_the_other_systems_runs_with_the_same_seeds_and_steps(tmp_path):
    steps = int(rl_learning.ENVS["CartPole-v1"][2] * 0.5)
    earlier = [dict(run(system, seed, [1.0]), steps=steps) for system in ("tempo", "cleanrl", "sb3")
               for seed in (1, 2, 3)]
    earlier.append(dict(run("cleanrl", 1, [7.0]), steps=steps + 1))  # another budget: left out
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"runs": earlier}))
    got = rl_learning.reused([str(path)], ["CartPole-v1"], [1, 2], ["tempo"], 0.5)
    assert [(r["system"], r["seed"], r["episodes"][0][1]) for r in got] == [
        ("cleanrl", 1, 1.0), ("cleanrl", 2, 1.0), ("sb3", 1, 1.0), ("sb3", 2, 1.0)]
    with pytest.raises(SystemExit, match="lack the runs"):
        rl_learning.reused([str(path)], ["CartPole-v1"], [1, 4], ["tempo"], 0.5)
    with pytest.raises(SystemExit, match="no run of another system"):
        rl_learning.reused([str(path)], ["CartPole-v1"], [1], ["tempo"], 0.25)
    assert rl_learning.reused([], ["CartPole-v1"], [1], ["tempo"], 0.5) == []


def test_set_overrides_the_environments_hyper_parameters_for_every_system():
    for system in ("tempo", "cleanrl", "sb3"):
        argv = rl_learning.command(system, "CartPole-v1", 2, 1000, "gymnasium", "", {"num_envs": "16"})
        assert "--num-envs=16" in argv and "--num-envs=4" not in argv
        assert "--num-steps=128" in argv and "--seed=2" in argv and "--total-timesteps=1000" in argv


def test_the_cleanrl_style_baseline_is_the_same_run_for_the_same_seed():
    """Its minibatch shuffles draw from NumPy's global generator, seeded as CleanRL seeds it; a seed
    spread of the baseline is then a spread over seeds, not over runs."""
    spec_ = importlib.util.spec_from_file_location("cleanrl_rollout_ppo",
                                                   ROOT / "benchmarks" / "baselines" / "cleanrl_rollout_ppo.py")
    baseline = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(baseline)
    runs = [baseline.main(baseline.parse(["--total-timesteps", "2048", "--num-steps", "64", "--seed", "3"]))
            for _ in range(2)]
    assert [e[:3] for e in runs[0]["episodes"]] == [e[:3] for e in runs[1]["episodes"]]
    assert len(runs[0]["episodes"]) > 10


def test_workers_write_and_read_bytecode_under_the_shared_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = rl_learning.worker_env(str(tmp_path))
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(tmp_path)
    module = tmp_path / "src" / "bytecode_probe.py"
    module.parent.mkdir()
    module.write_text("X = 1\n")
    probe = [sys.executable, "-c", "import sys, bytecode_probe; print(sys.flags.dont_write_bytecode)"]
    done = subprocess.run(probe, env=dict(env, PYTHONPATH=str(module.parent)), capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "0"
    assert list(tmp_path.rglob("bytecode_probe*.pyc")) and not (module.parent / "__pycache__").exists()


def test_a_boolean_setting_is_the_switch_both_systems_parse():
    """``--set bootstrap_truncation=False`` (CleanRL's own choice) reaches the example and the CleanRL-style
    loop as ``--no-bootstrap-truncation``."""
    import runpy

    import tempo as tpo

    spec_ = importlib.util.spec_from_file_location("cleanrl_rollout_ppo",
                                                   ROOT / "benchmarks" / "baselines" / "cleanrl_rollout_ppo.py")
    baseline = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(baseline)
    example = runpy.run_path(str(ROOT / "examples" / "ppo_continuous.py"), run_name="example")
    for value, expected in (("False", False), ("True", True)):
        overrides = {"bootstrap_truncation": value}
        tempo_argv = rl_learning.command("tempo", "HalfCheetah-v5", 1, 2048, "gymnasium", "", overrides)
        cleanrl_argv = rl_learning.command("cleanrl", "HalfCheetah-v5", 1, 2048, "gymnasium", "", overrides)
        switch = "--bootstrap-truncation" if expected else "--no-bootstrap-truncation"
        assert switch in tempo_argv and switch in cleanrl_argv
        assert tpo.rl.training.parse_args(example["Args"], "", tempo_argv[4:]).bootstrap_truncation is expected
        assert baseline.parse(cleanrl_argv[2:]).bootstrap_truncation is expected
