"""Statements over a state's dim run inside the loop over that dim, at their own iteration."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api import stages
from tempo.schedule import ast

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reinforce.py")


def loops_holding(stmt, node_id: int, loops=()) -> list[tuple[ast.Loop, ...]]:
    """The loops around each statement executing ``node_id``, outermost first."""
    if isinstance(stmt, ast.Execute):
        return [loops] if stmt.node_id == node_id else []
    if isinstance(stmt, ast.Sequence):
        return [x for s in stmt.body for x in loops_holding(s, node_id, loops)]
    if isinstance(stmt, ast.Loop):
        return loops_holding(stmt.body, node_id, (*loops, stmt))
    if isinstance(stmt, ast.If):
        return loops_holding(stmt.then, node_id, loops) + \
            (loops_holding(stmt.orelse, node_id, loops) if stmt.orelse is not None else [])
    return []


def reference(rate: float, decay: float, iterations: int, steps: int) -> np.ndarray:
    """The state over ``iterations``: ``w[i + 1] = decay * w[i] + c[i, 0:T].sum()``, where
    ``c[i, 0] = i`` and ``c[i, t + 1] = rate * c[i, t] + 1``."""
    w = [1.0]
    for i in range(iterations - 1):
        c = [float(i)]
        for _ in range(steps - 1):
            c.append(rate * c[-1] + 1.0)
        w.append(decay * w[-1] + sum(c))
    return np.asarray(w)


@settings(max_examples=8, deadline=None)
@given(rate=st.sampled_from([0.0, 0.5, 1.0]), decay=st.sampled_from([0.5, 0.9]), iterations=st.integers(3, 5),
       steps=st.integers(2, 6))
def test_a_recurrence_the_state_does_not_feed_runs_inside_the_state_loop(rate, decay, iterations, steps):
    """A recurrence over (i, t) reads nothing of the state ``w`` over i (an environment's done
    flags beside a learner); it runs inside the loop over i, each iteration's values at it."""
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        c = tpo.placeholder((), "float32", dims=(i, t))
        c[i, 0] = tpo.eval_symbol(i).cast("float32")
        c[i, t + 1] = c[i, t] * rate + 1.0
        w = tpo.placeholder((), "float32", dims=(i,))
        w[0] = 1.0
        w[i + 1] = w[i] * decay + c[i, 0:T].sum()
        program = ctx.compile(fetch=[w])
    out, = program.run({I: iterations, T: steps})
    np.testing.assert_allclose(out, reference(rate, decay, iterations, steps), rtol=1e-5)
    (state_loops,) = {loops[:1] for loops in loops_holding(program.ast, w.node.id)}
    over_i = [n for n, node in program.sdg.nodes.items() if any(d.name == "i" for d in node.domain)]
    assert len(over_i) > 1
    for n in over_i:
        for loops in loops_holding(program.ast, n):
            assert loops[:1] == state_loops, (program.sdg.describe(n), str(program.ast))


def program_values(feed: bool, read: str, end: bool, sink: str, ahead: bool, rate: float, bounds: dict,
                   nested: bool) -> tuple[list[np.ndarray], object]:
    """A program over ``(i, t)``: a recurrence ``c`` (fed by the state ``w`` or not), ended at run time
    by ``tpo.end_when`` or not, read by ``w``'s update whole (``sum``), at its last step (``last``) or
    through a window per step (``window``); a sink of ``used`` at every ``i`` (``every``), of the
    update at every other ``i`` (``every other``: the last update runs where ``I`` is even) or none; a
    statement over ``i`` reading the next state (``ahead``, which no loop over ``i`` runs at its own
    step) or none. ``nested``: scheduled with :func:`tempo.schedule.orderings.nesting`, else by isl
    alone. The values and the compiled program."""
    reported = []
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        w = tpo.placeholder((), "float64", dims=(i,))
        c = tpo.placeholder((), "float64", dims=(i, t))
        start = tpo.eval_symbol(i).cast("float64") * 0.25
        c[i, 0] = start + w[i] if feed else start
        c[i, t + 1] = c[i, t] * rate + 1.0
        if end:
            tpo.end_when(c[i, t] > 2.5)
        if read == "sum":
            used = c[i, 0:T].sum()
        elif read == "last":
            used = c[i, T - 1]
        else:
            used = c[i, tpo.max(0, t - 1):t + 1].sum()[i, 0:T].mean()
        update = w[i] * 0.5 + used * 0.1
        w[0] = tpo.full((), 1.0, "float64")
        w[i + 1] = update
        fetch = [w] if sink == "every other" else [w, used]
        if ahead:
            fetch.append(w[tpo.min(i + 1, I - 1)] - w[i])
        if sink != "none":
            value = used if sink == "every" else update[(i + 1) % 2 == 0]
            tpo.sink(value, lambda value, point: reported.append(float(value)))
        with pytest.MonkeyPatch.context() as patch:
            if not nested:
                patch.setattr(stages.schedule_orderings, "nesting", lambda sdg, executed: None)
            program = ctx.compile(fetch=fetch)
    return [*program.run(bounds), np.asarray(reported)], program


@settings(max_examples=12, deadline=None)
@given(feed=st.booleans(), read=st.sampled_from(["sum", "last", "window"]), end=st.booleans(),
       sink=st.sampled_from(["none", "every", "every other"]),
       ahead=st.booleans(), rate=st.sampled_from([0.5, 1.0, 1.5]), iterations=st.integers(2, 4),
       steps=st.integers(2, 6))
def test_random_programs_compute_the_same_values_nested_or_scheduled_by_isl_alone(feed, read, end, sink, ahead, rate,
                                                                               iterations, steps):
    bounds = {"I": iterations, "T": steps}
    nested, program = program_values(feed, read, end, sink, ahead, rate, bounds, nested=True)
    alone, _ = program_values(feed, read, end, sink, ahead, rate, bounds, nested=False)
    over_i = [n for n, node in program.sdg.nodes.items() if any(d.name == "i" for d in node.domain)]
    outermost = {loops[:1] for n in over_i for loops in loops_holding(program.ast, n)}
    if not ahead:  # one loop over i holds them (a read of the next state keeps isl's schedule)
        assert len(outermost) == 1, str(program.ast)
    assert len(nested) == len(alone)
    for a, b in zip(nested, alone):
        np.testing.assert_array_equal(a, b)


def test_an_end_when_program_whose_checkpoint_keeps_the_last_update_runs_it_at_its_own_step(tmp_path):
    """REINFORCE ending each iteration at run time (``tpo.end_when``), with a checkpoint every 4
    iterations: the learner's last iteration runs where ``I`` is a multiple of 4, in a branch of the
    loop over ``i`` whose guard fixes the counter to ``I - 1``. It reads that iteration's length, so
    it runs at the loop's counter, and it learns what the run without the checkpoint learns."""
    spec = importlib.util.spec_from_file_location("reinforce_state_loops", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    args = dict(iterations=4, batch=2, steps=30, until=True)
    kept = module.main(module.Args(**args, checkpoint=str(tmp_path / "run.safetensors"), checkpoint_every=4))
    plain = module.main(module.Args(**args))
    assert kept["returns"] == plain["returns"] and kept["computed_steps"] == plain["computed_steps"]
    assert (tmp_path / "run.safetensors").exists()
