"""Instances from XLA-compiled JAX trainers and the cost model behind them."""
from __future__ import annotations

import pytest

from tempo.cli import main
from tempo.memplan.agents.heuristic import heuristic_solution
from tempo.memplan.extract import CostModel, PROGRAMS, instance_from_trace
from tempo.memplan.extract.xla_dump import compile_and_trace
from tempo.memplan.problem import load_instance
from tempo.memplan.validate import validate


@pytest.fixture(scope="module")
def mlp_trace():
    return compile_and_trace(*PROGRAMS["mlp"](1), "mlp1")


def test_trace_reads_xla_schedule_and_buffer_assignment(mlp_trace):
    names = [i.name for i in mlp_trace.sequence]
    assert len(names) == len(set(names)) > 20
    position = {n: t for t, n in enumerate(names)}
    # every operand is defined earlier in XLA's schedule
    for t, inst in enumerate(mlp_trace.sequence):
        assert all(position[o] < t for o in inst.operands if o in position)
    dots = [i for i in mlp_trace.sequence if i.opcode == "dot" or "dot_general" in i.label]
    assert len(dots) >= 4 * 2          # forward and backward matmuls of 4 layers
    # a 512x512 float32 weight is 1 MiB in XLA's buffer assignment
    assert 512 * 512 * 4 in mlp_trace.size.values()


def test_instance_follows_the_program(mlp_trace):
    inst = instance_from_trace(mlp_trace, capacity_fraction=0.25)
    assert inst.num_steps == len(mlp_trace.sequence)
    times = [b.target_time for b in inst.buffers]
    assert times == sorted(times)
    for b in inst.buffers:
        assert b.live_range[0] <= b.target_time <= b.live_range[1]
        assert b.benefit >= 0 and b.demand > 0
        # an output lives from its definition; an operand from its tensor's definition
        if b.is_output:
            assert b.live_range[0] == b.target_time
    # in-place updates (SGD writes w - lr * g over the gradient) give alias groups of two
    groups = {}
    for b in inst.buffers:
        if b.alias_id is not None:
            groups.setdefault(b.alias_id, []).append(b)
    assert groups and all(sorted(x.is_output for x in g) == [False, True] for g in groups.values())
    assert all(s > 0 for s in inst.supply)
    assert inst.hbm_latency > sum(t.latency[0] - t.latency[-1] for t in inst.latencies) > 0


def test_cost_model_roofline():
    model = CostModel()
    memory_bound = model.table(1.0, [10**6, 10**6], [])
    # placing a buffer in fast memory never slows an instruction down
    assert memory_bound[0] > memory_bound[1] > memory_bound[3]
    assert memory_bound[1] == pytest.approx(memory_bound[2])
    compute_bound = model.table(1e12, [10**6, 10**6], [])
    assert max(compute_bound) == pytest.approx(min(compute_bound))
    assert model.demand(3 * 10**5) == pytest.approx(1.0)


def test_heuristic_on_a_real_instance_lowers_modelled_latency(mlp_trace):
    inst = instance_from_trace(mlp_trace)
    sol = heuristic_solution(inst)
    validate(inst, sol)
    assert 0 < sol.reward < inst.hbm_latency


def test_extract_command(tmp_path, capsys):
    out = tmp_path / "mlp.json"
    assert main(["memplan", "extract", "mlp", "--scale", "1", "--output", str(out)]) == 0
    inst = load_instance(out)
    assert len(inst.buffers) > 50 and inst.latencies
    assert main(["memplan", "extract", "lstm", "--output", str(out)]) == 2
    assert "unknown program 'lstm'" in capsys.readouterr().err
