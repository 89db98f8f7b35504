"""`tempo memplan solve` / `validate` end to end through the tempo command."""
from __future__ import annotations

import json

import pytest
from memplan_instances import random_instance

from tempo.cli import main
from tempo.memplan.problem import instance_to_json, write_json_atomic


@pytest.fixture
def instance_file(tmp_path):
    path = tmp_path / "inst.json"
    write_json_atomic(path, instance_to_json(random_instance(21, steps=40)))
    return path


@pytest.mark.parametrize("agent, budget", [
    ("heuristic", 0.5), ("random", 0.5),
    pytest.param("muzero", 15.0, marks=pytest.mark.slow),
    pytest.param("hybrid", 15.0, marks=pytest.mark.slow)])
def test_solve_then_validate(agent, budget, instance_file, tmp_path, capsys):
    out = tmp_path / f"{agent}.json"
    assert main(["memplan", "solve", str(instance_file), "--agent", agent,
                 "--budget-seconds", str(budget), "--output", str(out)]) == 0
    sol = json.loads(out.read_text())
    assert len(sol["decisions"]) == len(json.loads(instance_file.read_text())["buffers"])
    assert sol["reward"] > 0
    assert main(["memplan", "validate", str(instance_file), str(out)]) == 0
    assert "valid: reward" in capsys.readouterr().out


def test_validate_names_the_first_violated_constraint(instance_file, tmp_path, capsys):
    out = tmp_path / "sol.json"
    main(["memplan", "solve", str(instance_file), "--output", str(out)])
    sol = json.loads(out.read_text())
    sol["decisions"].pop(3)
    out.write_text(json.dumps(sol))
    capsys.readouterr()
    assert main(["memplan", "validate", str(instance_file), str(out)]) == 1
    assert capsys.readouterr().out.startswith("invalid: coverage: buffer 3 has no decision")


def test_bad_input_is_a_clean_error(instance_file, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"capacity": 10, "supply": [1.0], "buffers": [{"id": 0}]}))
    assert main(["memplan", "solve", str(bad), "--output", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tempo memplan: error: ") and "buffer 0" in err and "Traceback" not in err
    assert main(["memplan", "solve", str(tmp_path / "missing.json"),
                 "--output", str(tmp_path / "s.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["memplan", "solve", str(instance_file), "--agent", "oracle",
                 "--output", str(tmp_path / "s.json")]) == 2
    assert "unknown agent 'oracle'" in capsys.readouterr().err
