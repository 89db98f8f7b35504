"""The swap plan: evict and load statements in the AST, the passes over them, and runs that use them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api.compile import compile_program
from tempo.errors import TempoError
from tempo.schedule import ast, swap, swap_passes
from tempo.symbolic.expr import make_slice, symbol
from tests.schedule.chains import build_chain

WIDTH = 16384  # 64 KiB a point
XS = np.random.default_rng(1).normal(size=(3, 6, WIDTH)).astype(np.float32)


def acting_then_learning(ctx):
    """Rows produced one step at a time, read back at the step and, later, in slices."""
    (i, I), (t, T) = ctx.dims("i", "t")
    o = tpo.placeholder((WIDTH,), "float32", dims=(i, t))
    o[i, 0] = tpo.from_numpy(XS[:, 0], dims=(i,))
    o[i, t + 1] = (o[i, t] * 0.5).tanh() + tpo.from_numpy(XS, dims=(i, t))[i, t + 1]
    window = o[i, tpo.max(0, t - 2):t + 1].mean(axis=0)
    return [o[i, 0:T].sum(), window], {I: 3, T: 6}


def compiled(build, memory=None, stores="auto", swap_all=False, monkeypatch=None, passes=None):
    if swap_all:
        monkeypatch.setattr(swap, "MIN_BYTES", 0)
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx)
        # compiled as ctx.run compiles: for the run's bounds, which the plan's sizes need
        program = compile_program(ctx, fetch, bounds=bounds, memory=memory, passes=passes)
    return program, program.run(bounds, stores=stores)


def moves(program) -> list[ast.Evict]:
    return [s for s in ast.leaves(program.ast) if isinstance(s, ast.Evict)]


@pytest.mark.parametrize("stores", ["auto", "point"])
def test_a_budget_puts_evicts_and_loads_in_the_ast_and_the_results_do_not_change(stores, monkeypatch):
    plain, want = compiled(acting_then_learning, stores=stores)
    swapped, got = compiled(acting_then_learning, {"device_budget": "64MB"}, stores, True, monkeypatch)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert not moves(plain) and {type(m) for m in moves(swapped)} == {ast.Evict, ast.Load}
    text = str(swapped.ast)
    assert "evict " in text and "load " in text and ":" in text.split("load ", 1)[1].splitlines()[0]
    assert swapped.ledger.evicted > 0 and swapped.ledger.loaded > 0 and swapped.ledger.peak["host"] > 0
    assert plain.ledger.evicted == 0 and swapped.ledger.peak["device"] <= plain.ledger.peak["device"]
    assert "evicted to the host" in swapped.memory_report()


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_the_swap_plan_runs_on_the_other_backends_as_on_numpy(backend, monkeypatch):
    pytest.importorskip(backend)
    monkeypatch.setattr(swap, "MIN_BYTES", 0)
    want = compiled(acting_then_learning)[1]
    with tpo.Context() as ctx:
        fetch, bounds = acting_then_learning(ctx)
        program = compile_program(ctx, fetch, backend=backend, bounds=bounds, memory={"device_budget": "64MB"})
    got = program.run(bounds)
    assert moves(program) and program.ledger.evicted > 0
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_read_of_an_evicted_point_without_a_load_is_an_error(monkeypatch):
    """The runtime check behind the property test: it fails when a load is missing."""
    program, _ = compiled(acting_then_learning, {"device_budget": "64MB"}, swap_all=True, monkeypatch=monkeypatch)
    loads = [m for m in moves(program) if isinstance(m, ast.Load)]
    assert loads

    def without(stmt):
        if isinstance(stmt, ast.Sequence):
            return ast.Sequence(tuple(without(s) for s in stmt.body if s is not loads[-1]))
        if isinstance(stmt, ast.Loop):
            return ast.Loop(stmt.var, stmt.start, stmt.cond, stmt.step, without(stmt.body))
        if isinstance(stmt, ast.If):
            return ast.If(stmt.cond, without(stmt.then), without(stmt.orelse) if stmt.orelse else None)
        return stmt

    program.ast = without(program.ast)
    with pytest.raises(TempoError, match="evicted to the host"):
        program.run({"I": 3, "T": 6})


def test_small_tensors_are_not_swapped_and_the_memplan_plan_keeps_what_fits(monkeypatch):
    big, _ = compiled(acting_then_learning, {"device_budget": "64MB"})
    monkeypatch.setattr(swap, "MIN_BYTES", 2 << 20)
    small, _ = compiled(acting_then_learning, {"device_budget": "64MB"})
    assert moves(big) and not moves(small)  # a block of o holds 1.1 MiB: over 1 MiB, under 2 MiB
    untiled = {"tile": False}  # one program under both budgets
    roomy, got = compiled(acting_then_learning, {"device_budget": "64MB", "plan": "memplan"}, swap_all=True,
                          monkeypatch=monkeypatch, passes=untiled)
    tight, same = compiled(acting_then_learning, {"device_budget": "3MB", "plan": "memplan"}, swap_all=True,
                           monkeypatch=monkeypatch, passes=untiled)
    assert not moves(roomy) and moves(tight)
    for g, w in zip(got, same):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(TempoError, match="takes 'default', 'memplan' or 'memplan:AGENT'"):
        compiled(acting_then_learning, {"device_budget": "1MB", "plan": "lru"})


# ----- the AST passes on hand-built statements -----

N = 0  # node ids of a program whose node 0 is read by node 1
c = symbol("c0")


class TwoNodes:
    """The little of an SDG the passes read: node 0 with one output, read by node 1."""

    class _Node:
        shapes = ((4,),)

    nodes = {0: _Node(), 1: _Node(), 2: _Node()}
    edges = [type("E", (), {"src": 0, "src_out": 0, "sink": 1, "sink_in": 0})()]


def test_an_evict_then_a_load_of_the_same_point_with_no_use_between_is_removed():
    body = ast.Sequence((ast.Execute(0, (c,)), ast.Evict(0, (c,)), ast.Execute(2, (c,)), ast.Load(0, (c,)),
                         ast.Execute(1, (c,)), ast.Evict(0, (c,))))
    out = swap_passes.apply(TwoNodes, body)
    assert [type(s).__name__ for s in out.body] == ["Execute", "Execute", "Execute", "Evict"]
    used = ast.Sequence((ast.Execute(0, (c,)), ast.Evict(0, (c,)), ast.Execute(1, (c,)), ast.Load(0, (c,))))
    assert swap_passes.apply(TwoNodes, used) == used  # a use between: both stay
    other = ast.Sequence((ast.Evict(0, (c,)), ast.Load(0, (c - 1,))))
    assert swap_passes.apply(TwoNodes, other) == other  # other points: both stay


def test_an_evict_before_a_guarded_load_becomes_the_else_and_repeated_loads_go():
    guarded = ast.Sequence((ast.Execute(0, (c,)), ast.Evict(0, (c,)),
                            ast.If(c < 3, ast.Sequence((ast.Load(0, (c,)), ast.Execute(1, (c,)), ast.Evict(0, (c,)))))))
    out = swap_passes.apply(TwoNodes, guarded)
    assert str(out).split() == ["S0[c0]", "if", "c0", "<", "3:", "S1[c0]", "evict", "S0[c0]", "else:",
                                "evict", "S0[c0]"]
    twice = ast.Sequence((ast.Load(0, (c,)), ast.Execute(1, (c,)), ast.Load(0, (c,)), ast.Execute(1, (c,))))
    assert [type(s).__name__ for s in swap_passes.apply(TwoNodes, twice).body] == ["Load", "Execute", "Execute"]


def test_a_loop_of_moves_only_is_promoted_to_a_move_of_a_slice():
    T = symbol("T", "bound", "t")
    loop = ast.Loop("c0", symbol("c0") * 0, c < T, 1, ast.Sequence((ast.Evict(0, (c + 1,)),)))
    (promoted,) = swap_passes.apply(TwoNodes, ast.Sequence((loop,))).body
    assert isinstance(promoted, ast.Evict) and promoted.index[0] is make_slice(1, T + 1)
    mixed = ast.Loop("c0", symbol("c0") * 0, c < T, 1, ast.Sequence((ast.Evict(0, (c,)), ast.Load(0, (c,)))))
    assert swap_passes.promote(mixed) is mixed  # an evict and a load of one tensor keep their order
    computing = ast.Loop("c0", symbol("c0") * 0, c < T, 1, ast.Sequence((ast.Execute(1, (c,)), ast.Evict(0, (c,)))))
    assert swap_passes.promote(computing) is computing


# ----- the property: random programs under a budget -----

@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "shift", "window", "causal", "whole", "recur"]), min_size=1, max_size=4),
       st.sampled_from(["auto", "point"]), st.booleans())
@example(["tanh", "recur"], "auto", True)  # freed in a later loop than the one making it: every point live at once
def test_random_programs_under_a_budget_never_read_an_evicted_point_and_compute_the_same(chain_ops, stores, memplan):
    """Every tensor read in slices swaps; a read of a point on the host alone is an internal
    error (the stores check it), so a run that finishes read nothing evicted without a load."""
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        v, outs = build_chain(chain_ops, XS, i, t, T)
        return outs + [v[i, 0:T].mean(axis=0)], {I: 3, T: 6}

    untiled = {"tile": False}  # the same program under every budget
    swap.MIN_BYTES, kept = 0, swap.MIN_BYTES
    try:
        default, got = compiled(build, {"device_budget": "64MB"}, stores, passes=untiled)
        runs = [got]
        if memplan:  # room for about half of what the default plan swaps
            budget = default.ledger.peak["device"] + default.ledger.peak["host"] // 2 + 1
            runs.append(compiled(build, {"device_budget": budget, "plan": "memplan"}, stores, passes=untiled)[1])
    finally:
        swap.MIN_BYTES = kept
    _, want = compiled(build, stores=stores, passes=untiled)
    event(f"{len(moves(default))} moves")
    for got in runs:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


# ----- the RL examples under a budget -----

def returns(example: str, memory=None, **options):
    """The returns of ``examples/<example>.py`` on tempo/Synthetic-v0 with 3x32x32 observations, its
    programs compiled with ``memory``; and the program."""
    from benchmarks.rl_train import _example
    from tempo.api import compile as compile_mod

    module, original, programs = _example(example), compile_mod.compile_program, []

    def with_memory(*args, **kwargs):
        kwargs["memory"] = memory
        programs.append(original(*args, **kwargs))
        return programs[-1]

    compile_mod.compile_program = with_memory
    try:
        args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape="3,32,32", batch=3, steps=48,
                           iterations=3, hidden=16, **options)
        return module.main(args)["returns"], programs[0]
    finally:
        compile_mod.compile_program = original


@pytest.mark.parametrize("example, options, tight, roomy", [("reinforce", {"nstep": 0}, "3MB", "8MB"),
                                                            ("ppo_fixed_horizon", {"epochs": 2}, "4MB", "16MB")])
def test_the_rl_examples_train_the_same_under_both_swap_plans(example, options, tight, roomy):
    """3 x 48 x 3x32x32 floats: 1.7 MiB of observations an iteration; the default plan swaps them,
    the memplan plan keeps them on the device where the budget has room, and a tight budget (in
    tiles) swaps them under both."""
    want, _ = returns(example, None, **options)
    runs = {(budget, plan): returns(example, {"device_budget": budget, "plan": plan}, **options)
            for budget in (tight, roomy) for plan in ("default", "memplan")}
    for got, program in runs.values():
        assert got == want and program.ledger.peak["device"] <= program.memory["device_budget"]
    evicted = {key: program.ledger.evicted for key, (_, program) in runs.items()}
    assert evicted[(roomy, "default")] > 0 and evicted[(roomy, "memplan")] == 0
    assert evicted[(tight, "memplan")] > 0
