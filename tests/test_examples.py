"""Smoke tests: every example runs to completion through the tempo CLI."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args, expect", [
    ("examples/returns.py", ["--steps", "7"], "ok: returns and window means match"),
    ("examples/inspect_program.py", ["--steps", "5"], "== schedule AST =="),
    ("examples/reinforce.py", ["--iterations", "2", "--batch", "2", "--steps", "20", "--nstep", "8"],
     "mean_return="),
    ("examples/a2c.py", ["--iterations", "2", "--batch", "2", "--steps", "20"], "mean_return="),
    ("examples/ppo.py", ["--iterations", "2", "--epochs", "2", "--batch", "2", "--steps", "20"],
     "iterations=2 "),
])
def test_example_runs(script, args, expect, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tempo", "run", str(ROOT / script), *args],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout


def test_ppo_collects_episodes_once_per_batch(monkeypatch):
    """Acting is written for every update but runs only where an update reads it: once per batch."""
    import runpy

    from tempo.rl import gym_env

    resets = []
    reset_one = gym_env._Episodes._reset_one
    monkeypatch.setattr(gym_env._Episodes, "_reset_one",
                        lambda self, key: resets.append(key) or reset_one(self, key))
    ppo = runpy.run_path(str(ROOT / "examples" / "ppo.py"), run_name="ppo")
    args = ppo["Args"](iterations=3, epochs=4, batch=2, steps=10)
    summary = ppo["main"](args)
    assert len(resets) == args.iterations * args.batch  # not iterations * epochs * batch
    assert sorted({key[1] for key in resets}) == [0, 4, 8]  # the first update of each batch
    assert len(summary["returns"]) == args.iterations
