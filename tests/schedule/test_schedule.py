"""Polyhedral scheduling: executed domains, the AST, and unschedulable cycles."""
import numpy as np
import pytest

import tempo as tpo
from tempo.schedule import ast


def test_recurrence_only_executes_the_points_it_needs():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(np.arange(6.0), dims=(t,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = r[0]
        step = s[t] + r[t + 1]  # r[t + 1] is out of range at t = T - 1, where it is not needed
        s[t + 1] = step
        program = ctx.compile(fetch=[s])
    executed = program.domains.executed[step.node.id]
    assert "<= -2 + T }" in str(executed)  # 0 <= t < T - 1
    out, = program.run({T: 6})
    np.testing.assert_array_equal(out, np.cumsum(np.arange(6.0)))


def test_ast_is_a_loop_over_t_for_a_recurrence():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = 1.0
        s[t + 1] = s[t] * 2
        program = ctx.compile(fetch=[s])
    text = str(program.ast)
    assert "for c0 = 0; c0 < T; c0 += 1:\n  MergeOp" in text
    executes = list(ast.statements(program.ast))
    assert {e.node_id for e in executes} == {s.node.id} | {e.src for e in ctx.sdg.edges}


def test_anticausal_reads_are_scheduled_after_all_sources():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        x[0] = 1.0
        x[t + 1] = x[t] + 1.0
        future = x[t:T].sum()
        out, = ctx.run(bounds={T: 5}, fetch=[future])
    np.testing.assert_array_equal(out, [15, 14, 12, 9, 5])


def test_zero_distance_cycle_is_rejected_with_its_members():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        a = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        b = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        a[t] = b[t] + 1
        b[t] = a[t] * 2
        with pytest.raises(tpo.ScheduleError, match="cycle") as err:
            ctx.run(bounds={T: 3}, fetch=[a])
    assert "test_schedule.py" in str(err.value)
