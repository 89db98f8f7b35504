"""Islands as superopt graphs: the translation both ways and the checks a rewrite must pass."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.ir import ops
from tempo.superopt.costmodel import CostModel
from tempo.superopt.graph import node
from tempo.superopt.islands import Island, Untranslatable, optimise, to_graph, to_steps
from tempo.superopt.rules import load_rules
from tempo.superopt.search import SearchResult, greedy
from tempo.symbolic.expr import step_and_bound

t, T = step_and_bound("t")
b, B = step_and_bound("b")


def island(steps, outputs, in_shapes, in_dtypes=None) -> Island:
    return Island(ops.FusedOp(tuple(steps), tuple(outputs)), tuple(in_shapes),
                  tuple(in_dtypes or ["float32"] * len(in_shapes)))


def step(op, inputs, shape, dtype="float32"):
    return ops.FusedStep(op, tuple(inputs), (dtype,), shapes=(shape,))


def test_a_rewrite_that_only_types_at_the_stand_in_size_is_refused():
    x = island([step(ops.MatMulOp(), [(-1, 0), (-1, 1)], (B, 32))], [(0, 0)], [(B, 32), (32, 32)])
    g = to_graph(x, {"B": 32})
    a, w = g.inputs
    assert a.shape == (32, 32)
    wrong = g.with_outputs([node("matmul", node("concat", a, w, axis=-1), node("concat", w, w, axis=0))])
    with pytest.raises(Untranslatable, match="does not type at every size"):
        to_steps(wrong, x, {"B": 32})


def test_a_rewrite_that_computes_something_else_leaves_the_island_as_it_was():
    x = island([step(ops.ElementwiseOp("sub"), [(-1, 0), (-1, 1)], (B, 3))], [(0, 0)], [(B, 3), (B, 3)])

    def swapped(graph, rules, budget_s, model=None):
        a, c = graph.inputs
        return SearchResult(graph.with_outputs([node("sub", c, a)]), ["made_up"], 0.0)

    outcome = optimise(x, swapped, 1.0, {"B": 8}, ["b"], [], None)
    assert outcome.op is x.op and outcome.applied == []
    assert "different values" in outcome.kept


def test_steps_of_step_dependent_shape_and_other_dtypes_stay_opaque_and_come_back_unchanged():
    steps = [step(ops.ElementwiseOp("tanh"), [(-1, 0)], (t + 1, 3)),           # a growing window
             step(ops.CastOp("float64"), [(-1, 1)], (B, 3), "float64"),          # another dtype
             step(ops.ElementwiseOp("exp"), [(1, 0)], (B, 3), "float64"),
             step(ops.CastOp("float32"), [(-1, 1)], (B, 3)),                     # a no-op cast
             step(ops.ElementwiseOp("add"), [(3, 0), (-1, 1)], (B, 3))]
    x = island(steps, [(0, 0), (2, 0), (4, 0)], [(t + 1, 3), (B, 3)])
    g = to_graph(x, {})
    assert [n.op for n in g.outputs] == ["opaque", "opaque", "add"]
    back = to_steps(g, x, {})
    assert [type(s.op).__name__ for s in back.steps] == ["ElementwiseOp", "CastOp", "ElementwiseOp", "ElementwiseOp"]
    kernel_inputs = [np.ones((3, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]
    from tempo.runtime.backends.numpy import KERNELS
    env = {"t": 2, "B": 2}
    want = KERNELS[ops.FusedOp](x.op)(kernel_inputs, env, (2,))
    got = KERNELS[ops.FusedOp](back)(kernel_inputs, env, (2,))
    for a, c in zip(want, got):
        np.testing.assert_array_equal(a, c)


def test_greedy_cancels_a_double_transpose_in_an_island():
    steps = [step(ops.PermuteOp((1, 0)), [(-1, 1)], (4, 3)),
             step(ops.PermuteOp((1, 0)), [(0, 0)], (3, 4)),
             step(ops.MatMulOp(), [(-1, 0), (1, 0)], (B, 4))]
    x = island(steps, [(2, 0)], [(B, 3), (3, 4)])
    outcome = optimise(x, greedy, 5.0, {"B": 8}, [], load_rules(), CostModel(backend="numpy"))
    assert outcome.kept == ""
    assert "transpose_transpose_2d" in outcome.applied
    assert [type(s.op).__name__ for s in outcome.op.steps] == ["MatMulOp"]
    assert outcome.steps_before == 3 and outcome.steps_after == 1
