"""Instance and solution JSON: round trips and errors that name the bad key or buffer."""
from __future__ import annotations

import json

import pytest
from memplan_instances import random_instance

from tempo.memplan.problem import (MemplanError, instance_from_json, instance_to_json,
                                   load_instance, solution_from_json, solution_to_json,
                                   write_json_atomic)
from tempo.memplan.agents.heuristic import heuristic_solution


def test_instance_round_trip(tmp_path):
    inst = random_instance(3)
    path = tmp_path / "inst.json"
    write_json_atomic(path, instance_to_json(inst))
    again = load_instance(path)
    assert again.buffers == inst.buffers
    assert again.supply == inst.supply and again.capacity == inst.capacity
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_solution_round_trip():
    inst = random_instance(4)
    sol = heuristic_solution(inst)
    again = solution_from_json(json.loads(json.dumps(solution_to_json(sol))))
    assert again == sol


def _broken(mutate):
    obj = instance_to_json(random_instance(5))
    mutate(obj)
    with pytest.raises(MemplanError) as err:
        instance_from_json(obj, "inst")
    return str(err.value)


def test_missing_key_is_named():
    assert "missing key 'capacity'" in _broken(lambda o: o.pop("capacity"))
    assert "buffer 7" in _broken(lambda o: o["buffers"][7].pop("demand"))
    assert "'demand'" in _broken(lambda o: o["buffers"][7].pop("demand"))


def test_bad_values_are_named():
    assert "buffer 2" in _broken(lambda o: o["buffers"][2].update(size="big"))
    assert "live_range" in _broken(lambda o: o["buffers"][3].update(live_range=[5, 1]))
    assert "target_time" in _broken(lambda o: o["buffers"][0].update(target_time=10_000))
    assert "supply[1]" in _broken(lambda o: o["supply"].__setitem__(1, "x"))


def test_chronological_order_is_required():
    def swap(o):
        o["buffers"][0], o["buffers"][-1] = o["buffers"][-1], o["buffers"][0]
    assert "chronological" in _broken(swap)


def test_extra_keys_are_kept():
    obj = instance_to_json(random_instance(6))
    obj["model"] = "mlp"
    assert instance_to_json(instance_from_json(obj))["model"] == "mlp"
