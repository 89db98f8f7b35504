"""Game instances from Tempo schedules, and the swap plans their solutions make."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import tempo as tpo
from tempo.api.compile import compile_program
from tempo.cli import main
from tempo.memplan.extract import tempo_schedule
from tempo.memplan.problem import MemplanError, instance_from_json, instance_to_json
from tempo.memplan.validate import validate
from tempo.memplan.agents.heuristic import heuristic_solution
from tempo.plan import swap
from tempo.schedule import ast

WIDTH = 65536  # 256 KiB a point
XS = np.random.default_rng(2).normal(size=(2, 8, WIDTH)).astype(np.float32)
BOUNDS = {"I": 2, "T": 8}


def program(memory):
    """Two tensors acting writes row by row and a learner reads whole: 2 MiB a block each."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(XS, dims=(i, t))
        o = tpo.placeholder((WIDTH,), "float32", dims=(i, t))
        o[i, 0] = x[i, 0]
        o[i, t + 1] = (o[i, t] * 0.5).tanh() + x[i, t + 1]
        h = (o[i, t] * o[i, t]).sqrt()
        loss = o[i, 0:T].sum() + h[i, 0:T].mean()
        return compile_program(ctx, [loss], bounds={I: 2, T: 8}, memory=memory, passes={"tile": False})


def extracted(budget: int):
    p = program({"device_budget": budget})
    return p, tempo_schedule.program_instance(p, BOUNDS)


def test_the_instance_has_one_output_buffer_per_swapped_tensor_and_operands_at_its_readers():
    p, found = extracted(64 << 20)
    inst = found.instance
    keys = swap.candidates(p.sdg, p.ast, {n for n, _ in p.fetch}, BOUNDS)
    assert set(found.outputs) == keys and len(keys) >= 1
    for key, bid in found.outputs.items():
        out = inst.buffers[bid]
        assert out.is_output and out.size >= 2 << 20  # a block of 8 rows of 256 KiB
        reads = [b for b in inst.buffers if b.tensor_id == out.tensor_id and not b.is_output]
        assert reads and all(out.live_range[0] <= b.target_time <= out.live_range[1] for b in reads)
    assert 0 < inst.capacity < 64 << 20 and set(inst.supply) == {0.0}
    assert instance_from_json(json.loads(json.dumps(instance_to_json(inst)))) == inst
    validate(inst, heuristic_solution(inst))


def test_what_fits_stays_on_the_device_and_what_does_not_swaps():
    roomy, tight = extracted(64 << 20), extracted(3 << 20)
    solve = lambda found: {d.buffer for d in heuristic_solution(found.instance).decisions if d.action == "nocopy"}
    assert set(roomy[1].outputs.values()) <= solve(roomy[1])
    assert not set(tight[1].outputs.values()) & solve(tight[1])


def test_the_memplan_plan_runs_like_the_default_plan_with_fewer_moves_when_there_is_room():
    want = program(None).run(BOUNDS)
    default = program({"device_budget": "64MB"})
    planned = program({"device_budget": "64MB", "plan": "memplan"})
    half = program({"device_budget": "14MB", "plan": "memplan"})  # room for one of the two
    moves = lambda p: [s for s in ast.leaves(p.ast) if isinstance(s, ast.Evict)]
    assert not moves(planned) and 0 < len(moves(half)) < len(moves(default))
    for p in (default, planned, half):
        got = p.run(BOUNDS)
        np.testing.assert_array_equal(got[0], want[0])
        assert p.ledger.peak["device"] <= p.memory["device_budget"]
    assert planned.ledger.evicted == 0 < default.ledger.evicted


def test_extract_tempo_writes_an_instance_that_solves_and_validates(tmp_path, capsys):
    script = tmp_path / "learner.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import numpy as np
        import tempo as tpo

        width = int(sys.argv[1])
        xs = np.ones((2, 8, width), np.float32)
        with tpo.Context() as ctx:
            (i, I), (t, T) = ctx.dims("i", "t")
            x = tpo.from_numpy(xs, dims=(i, t))
            o = tpo.placeholder((width,), "float32", dims=(i, t))
            o[i, 0] = x[i, 0]
            o[i, t + 1] = (o[i, t] * 0.5).tanh() + x[i, t + 1]
            ctx.run({{I: 2, T: 8}}, fetch=[o[i, 0:T].sum()], passes={{"tile": False}})
        raise SystemExit("the run is not reached: extract stops at the compiled program")
    """))
    out, sol = tmp_path / "inst.json", tmp_path / "sol.json"
    assert main(["memplan", "extract", "tempo", str(script), "--args", str(WIDTH), "--budget", "64MB",
                 "--output", str(out)]) == 0
    inst = json.loads(out.read_text())
    assert inst["source"] == "tempo" and inst["tensors"] and inst["budget"] == 64_000_000
    assert main(["memplan", "solve", str(out), "--agent", "heuristic", "--budget-seconds", "1",
                 "--output", str(sol)]) == 0
    assert main(["memplan", "validate", str(out), str(sol)]) == 0
    assert main(["memplan", "extract", "tempo", "--output", str(out)]) == 2
    assert "takes the Tempo script" in capsys.readouterr().err


def test_an_instance_needs_bounds_and_a_budget():
    p = program(None)
    with pytest.raises(MemplanError, match="bounds and a device budget"):
        tempo_schedule.program_instance(p, BOUNDS)
