"""benchmarks/rl_spread_criterion.py: how often the seed-spread criterion holds between groups of seeds."""
from __future__ import annotations

import importlib.util
import itertools
import json
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rl_spread_criterion", ROOT / "benchmarks" / "rl_spread_criterion.py")
criterion = sys.modules["rl_spread_criterion"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(criterion)


def run(system: str, seed: int, level: float) -> dict:
    """A run of 100 steps whose every episode (one per 5 steps) returns ``level``."""
    return {"system": system, "env": "CartPole-v1", "seed": seed, "steps": 100,
            "episodes": [[5 * (k + 1), level, 5] for k in range(20)]}


def write(tmp_path, runs: list[dict]) -> str:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": runs}))
    return str(path)


def test_rates_count_every_pair_of_disjoint_groups(tmp_path):
    # baseline seeds at levels 0..5; tempo at 2.5 (inside every spread of groups straddling it)
    runs = [run("cleanrl", s, float(s)) for s in range(6)] + [run("tempo", s, 2.5) for s in range(3)]
    result = criterion.main(["--env", "CartPole-v1", "--results", write(tmp_path, runs), "--out",
                             str(tmp_path / "out")])
    groups = list(itertools.combinations(range(6), 3))
    itself = result["cleanrl_against_itself"]
    assert itself["pairs"] == 20  # each of the C(6,3) groups against the one disjoint group left
    # a group's mean (its levels' mean) lies within the other group's range, the same at every tenth
    expected = sum(min(set(range(6)) - set(a)) <= sum(a) / 3 <= max(set(range(6)) - set(a)) for a in groups) / 20
    assert 0 < expected < 1
    assert itself["every_tenth"] == pytest.approx(expected)
    assert itself["per_tenth"] == [round(expected, 3)] * 10
    tempo = result["tempo_against_cleanrl"]
    assert tempo["pairs"] == 20  # tempo's one group against each baseline group
    assert tempo["every_tenth"] == pytest.approx(sum(min(g) <= 2.5 <= max(g) for g in groups) / 20)
    assert json.loads((tmp_path / "out.json").read_text())["size"] == 3


def test_too_few_seeds_is_an_error(tmp_path):
    runs = [run("cleanrl", s, 0.0) for s in range(3)] + [run("tempo", s, 0.0) for s in range(3)]
    with pytest.raises(SystemExit, match="need 3 seeds of each system and 6 of one"):
        criterion.main(["--env", "CartPole-v1", "--results", write(tmp_path, runs)])


def test_rank_sum_p_is_the_exact_two_sided_fraction():
    # 3 against 3 fully apart: only the two extreme splits of the 20 are as far from the centre
    assert criterion.rank_sum_p(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])) == pytest.approx(2 / 20)
    assert criterion.rank_sum_p(np.array([1.0, 4.0, 5.0]), np.array([2.0, 3.0, 6.0])) == 1.0  # rank sum at its mean
    tied = criterion.rank_sum_p(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert tied == 1.0
