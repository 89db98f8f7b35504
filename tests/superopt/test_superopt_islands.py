"""Islands as superopt graphs: the translation both ways, running island graphs, and the checks
a rewrite must pass."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.ir import ops
from tempo.superopt.costmodel import CostModel
from tempo.superopt.execute import default_backend, run
from tempo.superopt.graph import node
from tempo.superopt.islands import (Island, Untranslatable, _check_values, island_backend, optimise, to_graph,
                                    to_steps)
from tempo.superopt.rules import load_rules
from tempo.symbolic.expr import step_and_bound

t, T = step_and_bound("t")
b, B = step_and_bound("b")


def island(steps, outputs, in_shapes, in_dtypes=None, sizes=None) -> Island:
    return Island(ops.FusedOp(tuple(steps), tuple(outputs)), tuple(in_shapes),
                  tuple(in_dtypes or ["float32"] * len(in_shapes)), ("t",), sizes or {})


def step(op, inputs, shape, dtype="float32"):
    return ops.FusedStep(op, tuple(inputs), (dtype,), shapes=(shape,))


def test_a_rewrite_that_only_types_at_the_stand_in_size_is_refused():
    x = island([step(ops.MatMulOp(), [(-1, 0), (-1, 1)], (B, 32))], [(0, 0)], [(B, 32), (32, 32)],
               sizes={"B": 32})
    g = to_graph(x)
    a, w = g.inputs
    assert a.shape == (32, 32)
    wrong = g.with_outputs([node("matmul", node("concat", a, w, axis=-1), node("concat", w, w, axis=0))])
    with pytest.raises(Untranslatable, match="does not type at every size"):
        to_steps(wrong, x)


def test_a_rewrite_that_computes_something_else_is_refused_by_the_numerical_check():
    x = island([step(ops.ElementwiseOp("sub"), [(-1, 0), (-1, 1)], (B, 3))], [(0, 0)], [(B, 3), (B, 3)],
               sizes={"B": 4})
    g = to_graph(x)
    a, c = g.inputs
    _check_values(x, to_steps(g, x))
    with pytest.raises(Untranslatable, match="different values"):
        _check_values(x, to_steps(g.with_outputs([node("sub", c, a)]), x))


def test_without_rules_nothing_is_rewritten_and_the_island_keeps_its_steps():
    x = island([step(ops.ElementwiseOp("sub"), [(-1, 0), (-1, 1)], (B, 3))], [(0, 0)], [(B, 3), (B, 3)])
    outcome = optimise(x, "greedy", 1.0, [], model=CostModel(backend="numpy"))
    assert outcome.kept == "no rule matches" and outcome.applied == []
    assert [type(s.op).__name__ for s in outcome.op.steps] == ["ElementwiseOp"]


def test_steps_of_other_dtypes_stay_opaque_and_come_back_unchanged():
    steps = [step(ops.CastOp("float64"), [(-1, 0)], (B, 3), "float64"),
             step(ops.ElementwiseOp("exp"), [(0, 0)], (B, 3), "float64"),
             step(ops.ElementwiseOp("add"), [(-1, 0), (-1, 0)], (B, 3))]
    x = island(steps, [(1, 0), (2, 0)], [(B, 3)], sizes={"B": 2})
    g = to_graph(x)
    assert [n.op for n in g.outputs] == ["opaque", "add"]
    back = to_steps(g, x)
    assert [type(s.op).__name__ for s in back.steps] == ["CastOp", "ElementwiseOp", "ElementwiseOp"]
    feeds = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    for a, c in zip(x.kernel(x.op)(feeds), x.kernel(back)(feeds)):
        np.testing.assert_array_equal(a, c)


def test_an_island_whose_shapes_depend_on_a_step_is_left_alone():
    x = island([step(ops.ElementwiseOp("tanh"), [(-1, 0)], (t + 1, 3))], [(0, 0)], [(t + 1, 3)])
    outcome = optimise(x, "greedy", 1.0, load_rules(), model=CostModel(backend="numpy"))
    assert outcome.op is x.op and outcome.kept.startswith("a shape depends on a step")


def test_island_graphs_run_as_the_island_steps_inside_the_island_backend():
    x = island([step(ops.ElementwiseOp("tanh"), [(-1, 0)], (B, 3))], [(0, 0)], [(B, 3)], sizes={"B": 2})
    g = to_graph(x)
    feeds = {"in0": np.ones((2, 3), np.float32)}
    with island_backend(x):
        assert default_backend() == "island"
        (out,) = run(g, feeds)
    assert default_backend() == "torch"
    np.testing.assert_allclose(out, np.tanh(np.ones((2, 3))), rtol=1e-6)


@pytest.mark.parametrize("agent", ["greedy", "backtrack"])
def test_a_double_transpose_in_an_island_is_cancelled(agent):
    steps = [step(ops.PermuteOp((1, 0)), [(-1, 1)], (4, 3)),
             step(ops.PermuteOp((1, 0)), [(0, 0)], (3, 4)),
             step(ops.MatMulOp(), [(-1, 0), (1, 0)], (B, 4))]
    x = island(steps, [(2, 0)], [(B, 3), (3, 4)], sizes={"B": 64})
    outcome = optimise(x, agent, 3.0, load_rules(), model=CostModel(backend="numpy"))
    assert outcome.kept == "", outcome.kept
    assert "transpose_transpose_2d" in outcome.applied
    assert [type(s.op).__name__ for s in outcome.op.steps] == ["MatMulOp"]
    assert outcome.after_ms < outcome.before_ms


def test_nans_in_the_same_places_are_the_same_outputs():
    from tempo.superopt.graph import GraphBuilder
    from tempo.superopt.optimize import same_outputs

    g = GraphBuilder(0)
    x = g.input("x", (4, 8))
    root = node("sqrt", x)                      # NaN wherever the random input is negative
    a, b = g.build([node("mul", root, root)]), g.build([node("mul", root, node("sqrt", x))])
    c = g.build([node("add", root, root)])
    assert same_outputs(a, b)
    assert not same_outputs(a, c)
