"""The ExecutionPlan: made once at compile time, printable, comparable, read by every run."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tempo as tpo
from tempo import plan as plan_mod
from tempo.errors import TempoError
from tempo.plan.store_choice import StoreChoice
from tempo.runtime.executor import source

T_ = 12


def _windowed(passes=None):
    """x[t + 1] reads a window of x itself (a window store); the mean of a causal slice of y
    (a block store)."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.placeholder(shape=(3,), dtype="float64", dims=(t,))
        x[0] = tpo.full((3,), 1.0, "float64")
        mean = x[tpo.max(0, t - 3):t + 1].mean(axis=0)
        x[t + 1] = x[t] * 0.5 + mean
        y = tpo.from_numpy(np.arange(T_, dtype=np.float64), dims=(t,)) * 2.0
        causal = y[0:t + 1].sum()
        program = ctx.compile(fetch=[mean, causal], passes={"fuse": False, "lift": False, **(passes or {})})
    return program, x, y


def _training_loop():
    """A state updated over i, freed behind the loop as it goes."""
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        state = tpo.placeholder(shape=(4,), dtype="float32", dims=(i,))
        state[0] = tpo.ones((4,), "float32")
        mean = state.mean()
        state[i + 1] = state[i] - 0.5 * mean[i]
        program = ctx.compile(fetch=[mean])
    return program, state


def _counting(monkeypatch) -> list:
    """A list that grows by one at every plan made from now on."""
    made, build = [], plan_mod.execution.build

    def counted(*args, **kwargs):
        made.append(args)
        return build(*args, **kwargs)

    for module in (plan_mod, plan_mod.execution):
        monkeypatch.setattr(module, "build", counted)
    import tempo.api.compile as compile_mod
    import tempo.runtime.executor as executor_mod
    monkeypatch.setattr(compile_mod, "build", counted)
    monkeypatch.setattr(executor_mod, "build", counted)
    return made


def test_the_program_holds_its_plan_with_each_tensors_store():
    program, x, y = _windowed()
    assert isinstance(program.plan, plan_mod.ExecutionPlan)
    assert program.plan.store(program.sdg.resolve(x.node.id, x.out)).kind == "window"
    assert program.plan.store(program.sdg.resolve(y.node.id, y.out)) == StoreChoice("block", None)


def test_the_plan_prints_its_stores_frees_and_loops():
    program, _ = _training_loop()
    text = str(program.plan)
    assert text.startswith("ExecutionPlan (stores='auto')")
    assert "freed after each iteration of the loop over" in text
    windowed, x, _ = _windowed()
    assert f"%{windowed.sdg.resolve(x.node.id, x.out)[0]}.0: window of" in str(windowed.plan)
    assert "device loops:" in str(windowed.plan) and "moves: 0 evicts, 0 loads" in str(windowed.plan)


def test_the_plan_is_immutable():
    program, _, _ = _windowed()
    with pytest.raises(dataclasses.FrozenInstanceError):
        program.plan.evictions = ()
    with pytest.raises(TypeError):
        program.plan.choices[(0, 0)] = StoreChoice("point")


def test_plans_compare_by_stores_and_frees():
    a, _, _ = _windowed()
    b, _, _ = _windowed()
    assert a.plan == b.plan
    assert a.plan != a.plan_for("point")
    trained, state = _training_loop()
    assert state.node.id in {e.node for e in trained.plan.evictions}
    assert trained.plan != dataclasses.replace(trained.plan, evictions=())


def test_a_second_run_makes_no_plan(monkeypatch):
    program, _ = _training_loop()
    made = _counting(monkeypatch)
    first = program.run({"I": 6})
    second = program.run({"I": 9})
    assert made == []
    np.testing.assert_array_equal(first[0], second[0][:6])


def test_point_stores_are_planned_once_on_their_first_run(monkeypatch):
    program, _, _ = _windowed()
    want = program.run({"T": T_})
    made = _counting(monkeypatch)
    for _ in range(2):
        got = program.run({"T": T_}, stores="point")
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w)
    assert len(made) == 1
    assert all(c.kind == "point" for c in program.point_plan.choices.values())


def test_an_unknown_store_mode_is_an_error():
    program, _, _ = _windowed()
    with pytest.raises(TempoError, match="not a store choice"):
        program.run({"T": 4}, stores="window")


def test_the_generated_code_is_written_from_the_plan():
    program, _ = _training_loop()
    assert ".free_below(" in program.code
    unfreed = dataclasses.replace(program.plan, evictions=())
    assert ".free_below(" not in source(program.sdg, program.ast, unfreed, program.domains.params)
