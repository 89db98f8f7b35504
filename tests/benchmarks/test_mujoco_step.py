"""benchmarks/mujoco_step.py: the CPU cost of a MuJoCo step, and its share of each system's step."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

pytest.importorskip("mujoco")

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mujoco_step", ROOT / "benchmarks" / "mujoco_step.py")
mujoco_step = sys.modules["mujoco_step"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mujoco_step)


def test_each_layer_costs_at_least_the_one_inside_it_and_shares_divide_by_the_runs_cost(tmp_path):
    runs = [{"system": "tempo", "env": "HalfCheetah-v5", "global_step": 1000, "process_cpu_s": 0.25},
            {"system": "cleanrl", "env": "HalfCheetah-v5", "global_step": 1000, "process_cpu_s": 0.5},
            {"system": "tempo", "env": "Hopper-v5", "global_step": 1000, "process_cpu_s": 9.0}]
    learning = tmp_path / "learning.json"
    learning.write_text(json.dumps({"runs": runs}))
    out = tmp_path / "step.json"
    report = mujoco_step.main(["--envs", "HalfCheetah-v5", "--steps", "1100", "--repeats", "1",
                               "--tempo-json", str(learning), "--out", str(out)])
    entry = report["envs"]["HalfCheetah-v5"]
    cost = {layer: entry["per_step"][layer]["cpu_us"] for layer in mujoco_step.LAYERS}
    assert 0.0 < cost["simulator"] < cost["cleanrl_vector"]  # the wrappers' normalisation costs on top
    assert entry["runs_cpu_us_per_step"] == {"tempo": [250.0], "cleanrl": [500.0]}
    assert entry["simulator_share"]["tempo"] == [cost["simulator"] / 250.0]
    assert json.loads(out.read_text())["envs"]["HalfCheetah-v5"]["simulator_share"] == entry["simulator_share"]
