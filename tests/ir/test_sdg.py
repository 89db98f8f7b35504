"""The SDG: printing, dot export, edges with dependence expressions and conditions."""
import numpy as np
import pytest

import tempo as tpo
from tempo.ir import ops
from tempo.ir.shapes import broadcast, infer
from tempo.errors import ShapeError
from tempo.symbolic import step_and_bound


def _program():
    ctx = tpo.Context()
    with ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(np.arange(5.0), dims=(t,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = r[0]
        s[t + 1] = s[t] + r[t + 1]
        g = r[t:T].sum()
    return ctx, s, g


def test_print_shows_edges_with_expressions_and_conditions():
    ctx, s, g = _program()
    text = str(ctx.sdg)
    assert "MergeOp(placeholder=True)[t]" in text
    assert "[t - 1] if 1 <= t" in text
    assert "[t:T]" in text


def test_print_shows_ops_whose_fields_are_expressions():
    ctx = tpo.Context()
    with ctx:
        (t, T), = ctx.dims("t")
        k = tpo.eval_symbol(t + 1)
    assert "EvalSymbolOp(expr=t + 1)[t]" in str(ctx.sdg)
    assert k.dtype == "int64"


def test_to_dot_has_a_node_and_labelled_edge_per_dependence():
    ctx, s, g = _program()
    dot = ctx.sdg.to_dot()
    assert dot.startswith("digraph sdg {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(ctx.sdg.edges)
    assert 'label="[t:T]"' in dot


def test_edges_carry_input_and_output_ids():
    ctx, s, g = _program()
    merge_edges = ctx.sdg.in_edges(s.node.id)
    assert [e.sink_in for e in merge_edges] == [0, 1]
    assert merge_edges[0].cond is not None and merge_edges[1].cond is not None


def test_broadcast_and_symbolic_shapes():
    t, T = step_and_bound("t")
    assert broadcast([(3, 1), (4,)]) == (3, 4)
    assert broadcast([(T - t, 1), (1, 2)])[1] == 2
    with pytest.raises(ShapeError, match="broadcast"):
        broadcast([(3,), (4,)])


def test_shape_rules_per_op():
    assert infer(ops.MatMulOp(), [(2, 3), (3, 5)], ["float32", "float32"]) == (((2, 5),), ("float32",))
    assert infer(ops.ReshapeOp((-1, 2)), [(3, 4)], ["int64"]) == (((6, 2),), ("int64",))
    assert infer(ops.ReduceOp("mean", (1,)), [(3, 4)], ["int64"]) == (((3,),), ("float32",))
    assert infer(ops.DiscountedSumOp(0.9, 0), [(7, 2)], ["float64"]) == (((2,),), ("float64",))
    with pytest.raises(ShapeError):
        infer(ops.SqueezeOp(0), [(3,)], ["float32"])
