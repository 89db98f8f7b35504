"""Dead-code elimination: nodes no root depends on are dropped; the program computes the same."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge
from tempo.symbolic.expr import seq
from tempo.transforms import dce
from tests.transforms.simplification import compiled, ops_of, same_results, stat

XS = np.random.default_rng(0).standard_normal((6, 3))


def with_dead_branch(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS, dims=(t,))
    y = (x * 2.0).tanh()
    unused = (x.sin() + y).sum()  # noqa: F841 -- built, never fetched
    return [y]


def test_nodes_nothing_fetched_reads_are_dropped():
    program, got = compiled(with_dead_branch, {}, {"T": 6})
    _, want = compiled(with_dead_branch, {"dce": False}, {"T": 6})
    same_results(got, want)
    np.testing.assert_allclose(got[0], np.tanh(XS * 2.0))
    s = stat(program, "dce")
    assert s.nodes_after == s.nodes_before - 3  # the sin, the add and the sum
    assert not [n for n in ops_of(program, ops.ElementwiseOp) if n.op.fn == "sin"]
    assert not [n for n in ops_of(program, ops.ReduceOp)]


def test_sinks_and_parameter_updates_are_roots_and_stay():
    seen = []

    def build(ctx):
        (i, I), = ctx.dims("i")
        w = tpo.nn.parameter(np.array([1.0, -2.0], np.float32), dims=(i,))
        loss = (w * w).sum()
        loss.backward()
        tpo.optim.SGD([w], lr=0.25).step()
        tpo.sink(loss, lambda value, point: seen.append((point["i"], float(value))))
        return [loss]

    program, (loss,) = compiled(build, {"vectorize": False}, {"I": 3})
    assert [i for i, _ in seen] == [0, 1, 2]
    np.testing.assert_allclose(loss, [5.0, 1.25, 0.3125])
    assert ops_of(program, ops.UDFOp)


def test_apply_keeps_what_the_roots_read_and_drops_the_rest():
    sdg = SDG()
    one = sdg.add_node(ops.ConstOp(ops.Array(np.float32(1.0))), (), ((),), ("float32",))
    kept = sdg.add_node(ops.ElementwiseOp("exp"), (), ((),), ("float32",))
    dropped = sdg.add_node(ops.ElementwiseOp("sin"), (), ((),), ("float32",))
    for node in (kept, dropped):
        sdg.add_edge(Edge(node.id, 0, one.id, 0, seq()))
    sdg.roots = (kept.id,)
    out = dce.apply(sdg)
    assert set(out.nodes) == {one.id, kept.id} and len(out.edges) == 1
    assert set(sdg.nodes) == {one.id, kept.id, dropped.id}  # the input SDG is left as it was
    sdg.roots = ()
    assert dce.apply(sdg) is sdg  # no roots: everything is computed, nothing is dead
