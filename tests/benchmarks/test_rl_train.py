"""benchmarks/rl_train.py: Tempo, CleanRL-style torch and PureJaxRL-style JAX timed in one run."""
from __future__ import annotations

import importlib.util
import json
import math
import statistics
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rl_train", ROOT / "benchmarks" / "rl_train.py")
rl_train = sys.modules["rl_train"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(rl_train)


def harness(tmp_path, *flags):
    out = tmp_path / "rl_train.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_train.py"), "--quick", *flags,
                          "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text()), run.stdout


def check_measured(systems):
    assert set(systems) == set(rl_train.SYSTEMS)
    for name, r in systems.items():
        assert "skipped" not in r, (name, r)
        assert r["first_iteration_s"] > 0 and r["iteration_s"] > 0 and r["compile_s"] >= 0, (name, r)
        assert r["iteration_cpu_s"] > 0 and len(r["iterations_cpu_s"]) == len(r["iterations_s"]), (name, r)
        assert 0 <= r["iteration_sys_s"] <= r["iteration_cpu_s"] + 0.01, (name, r)  # the kernel's part of it
        assert len(r["iterations_s"]) == len(r["returns"]) == 3 and r["peak_rss_mb"] > 0
        assert r["speedup_over_slowest"] >= 1.0
    assert min(r["speedup_over_slowest"] for r in systems.values()) == 1.0
    for name in rl_train.TEMPO_BACKENDS:
        tempo = systems[name]
        assert tempo["compile_s"] > 0 and {"analyse", "schedule", "ast", "fuse"} <= set(tempo["compile_stages"])
        launches = tempo["launches_per_iteration"]
        assert launches[0] > 0 and launches[1] == launches[2]       # every full iteration launches the same
    returns = {name: systems[name]["returns"] for name in rl_train.TEMPO_BACKENDS}
    assert returns["tempo-torch"] == pytest.approx(returns["tempo-numpy"], rel=1e-4)  # same program, same draws
    assert returns["tempo-jax"] == pytest.approx(returns["tempo-numpy"], rel=1e-4)
    for name in ("purejaxrl", "purejaxrl-whole"):                   # ahead of time, apart from the first iteration
        assert systems[name]["compile_s"] > 0
    assert systems["purejaxrl-whole"]["returns"] == pytest.approx(systems["purejaxrl"]["returns"], rel=1e-5)
    for name in ("cleanrl", "purejaxrl", "purejaxrl-whole"):
        assert len(systems[name]["losses"]) == 3 and all(math.isfinite(x) for x in systems[name]["losses"])


def test_quick_run_times_every_system_at_the_default_point(tmp_path):
    report, stdout = harness(tmp_path, "--algo", "reinforce")
    (row,) = report["results"]
    assert row["algo"] == "reinforce" and row["sweep"] == "default" and row["point"]["steps"] == 8
    check_measured(row["systems"])
    assert (tmp_path / "rl_train.png").read_bytes().startswith(b"\x89PNG")
    assert "Tempo compile stages" in stdout and "speed-up" in stdout and "against PureJaxRL whole-run" in stdout


def test_ppo_on_jax_runs_its_iterations_on_the_device(tmp_path):
    """PPO's learner reads acting's done flags, which its last iteration does not compute at the last
    step (nothing reads them there): the loop over i still runs as one device program."""
    report, _ = harness(tmp_path, "--algo", "ppo", "--systems", "tempo-jax")
    measured = report["results"][0]["systems"]["tempo-jax"]
    assert "skipped" not in measured, measured
    launches = measured["launches_per_iteration"]
    assert max(launches) <= 1, launches                             # 8 an iteration where i runs on the host


@pytest.mark.slow
def test_quick_ppo_sweep_reuses_the_default_point_and_reports_what_it_skips(tmp_path):
    report, stdout = harness(tmp_path, "--algo", "ppo", "--sweep", "steps", "--points", "64",
                             "--max-seconds", "60")
    default, same, longer = report["results"]
    check_measured(default["systems"])
    assert same["value"] == 8 and same["systems"] == default["systems"]
    assert longer["value"] == 64
    for r in longer["systems"].values():                             # measured, or skipped with the reason
        assert ("iteration_s" in r) != ("skipped" in r)


def test_a_point_predicted_past_the_budget_is_estimated_from_the_nearest_point_below():
    measured = [(250, {"wall_s": 40.0}), (50, {"wall_s": 10.0}), (500, {"skipped": "ran past"})]
    assert rl_train.predicted_seconds(measured, 1000) == pytest.approx(160.0)   # from 250, not the skipped 500
    assert rl_train.predicted_seconds(measured, 100) == pytest.approx(20.0)
    assert rl_train.predicted_seconds(measured, 25) == pytest.approx(5.0)       # nothing below: the smallest
    assert rl_train.predicted_seconds([(8, {"skipped": "failed"})], 16) is None


def test_a_launch_of_several_iterations_counts_the_host_work_since_the_launch_before():
    """Iterations of a whole-loop launch end evenly from the end of the launch before (its sinks and this
    launch's preparation are this launch's), XLA's compile left out; the first launch's from its start."""
    probe = rl_train.LaunchProbe(backend=None)
    # (wall, process CPU, system CPU) marks: a first launch of 1 iteration that compiles 2 s, then one of 4
    probe.chunks = [((10.0, 5.0, 1.0), (2.0, 1.5, 0.0), (13.0, 7.0, 1.2), 1),
                    ((13.5, 7.2, 1.2), (0.0, 0.0, 0.0), (15.0, 8.0, 1.6), 4)]
    probe.ends[4], probe.ends_cpu[4], probe.ends_sys[4] = 15.1, 8.2, 1.6   # the last sink, after the launch
    wall, cpu, system = probe.iteration_ends(5)
    assert wall[0] == pytest.approx(13.0) and cpu[0] == pytest.approx(7.0) and system[0] == pytest.approx(1.2)
    assert [b - a for a, b in zip(wall, wall[1:])] == pytest.approx([0.525] * 4)   # (15.1 - 13.0) / 4
    assert [b - a for a, b in zip(cpu, cpu[1:])] == pytest.approx([0.3] * 4)       # (8.2 - 7.0) / 4
    assert [b - a for a, b in zip(system, system[1:])] == pytest.approx([0.1] * 4)


def test_the_steady_state_of_launches_of_several_iterations_is_the_median_launch():
    """Each launch's seconds per iteration over its timed iterations; a launch of none (the last, which does
    not learn) is left out, and one launch that pays a one-time cost does not decide the median."""
    seconds = [3.0, 0.02, 0.02, 0.02, 0.02, 0.03, 0.03, 0.03, 0.03, 0.018, 0.018, 0.018, 0.018]
    launches = rl_train.per_launch(seconds, [1, 4, 4, 4, 1])
    assert launches == pytest.approx([3.0, 0.02, 0.03, 0.018])
    assert statistics.median(launches[1:]) == pytest.approx(0.02)
    assert rl_train.per_launch(seconds[:11], [1, 4, 4, 4]) == pytest.approx([3.0, 0.02, 0.03, 0.018])
