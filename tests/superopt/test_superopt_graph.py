"""The graph IR: shape inference, hash-consing, rebuilding, constant analysis."""
from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from superopt_graphs import every_op_graph
from tempo.errors import TempoError
from tempo.superopt.graph import GraphBuilder, ShapeError, node
from tempo.superopt.reference import evaluate, random_feeds


def test_shapes_are_inferred_when_nodes_are_built():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 17, 17))
    y = node("conv2d", x, b.weight((8, 3, 3, 3)), stride=2, pad=1)
    assert y.shape == (2, 8, 9, 9)
    assert node("maxpool", y, kernel=3, stride=2, pad=1).shape == (2, 8, 5, 5)
    assert node("concat", y, y, axis=1).shape == (2, 16, 9, 9)
    assert node("transpose", y, perm=(0, 2, 3, 1)).shape == (2, 9, 9, 8)
    m = node("matmul", b.input("a", (4, 5, 6)), b.weight((6, 7)))
    assert m.shape == (4, 5, 7)
    assert node("add", m, b.weight((7,))).shape == (4, 5, 7)


@pytest.mark.parametrize("build, words", [
    (lambda b: node("conv2d", b.input("x", (1, 3, 8, 8)), b.weight((4, 2, 3, 3))), "groups=1"),
    (lambda b: node("matmul", b.input("x", (3, 4)), b.weight((5, 6))), "inner dimensions"),
    (lambda b: node("add", b.input("x", (3, 4)), b.weight((5,))), "broadcast"),
    (lambda b: node("slice", b.input("x", (3, 4)), axis=1, start=2, end=9), "not inside"),
    (lambda b: node("reshape", b.input("x", (3, 4)), shape=(5,)), "cannot become"),
    (lambda b: node("transpose", b.input("x", (3, 4)), perm=(0, 0)), "not a permutation"),
])
def test_bad_shapes_raise_shape_errors_naming_the_op(build, words):
    with pytest.raises(ShapeError) as info:
        build(GraphBuilder())
    assert words in str(info.value)


def test_unknown_ops_and_attributes_are_errors():
    b = GraphBuilder()
    with pytest.raises(TempoError, match="unknown tensor op 'frobnicate'"):
        node("frobnicate", b.input("x", (2,)))
    with pytest.raises(TempoError, match="relu has no attribute alpha"):
        node("relu", b.input("x", (2,)), alpha=0.1)


def test_nodes_are_hash_consed_and_axes_normalised():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    assert node("relu", x) is node("relu", x)
    assert node("concat", x, x, axis=2) is node("concat", x, x, axis=-1)
    assert node("relu", x) is not node("sigmoid", x)


def test_replace_rebuilds_only_what_changed():
    g = every_op_graph()
    order = g.topo()
    target = next(n for n in order if n.op == "gelu")
    swapped = g.replace({id(target): node("tanh", target.src[0])})
    assert swapped.outputs[1] is g.outputs[1]
    assert swapped.outputs[0] is not g.outputs[0]
    assert "gelu" not in swapped.op_counts() and swapped.op_counts()["tanh"] == 1
    feeds = random_feeds(g)
    assert np.allclose(evaluate(g, feeds)[1], evaluate(swapped, feeds)[1])
    assert not np.allclose(evaluate(g, feeds)[0], evaluate(swapped, feeds)[0])


def test_topological_order_puts_sources_first():
    g = every_op_graph()
    position = {id(n): i for i, n in enumerate(g.topo())}
    assert all(position[id(s)] < position[id(n)] for n in g.topo() for s in n.src)


def test_constant_ids_are_exactly_the_input_free_nodes():
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = node("concat", b.weight((4, 3)), b.weight((4, 3)), axis=1)
    y = node("matmul", x, w)
    const = b.build([y]).constant_ids()
    assert id(w) in const and id(w.src[0]) in const
    assert id(y) not in const and id(x) not in const


def test_pickled_graphs_are_interned_again_and_fold_in_another_process():
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    g = b.build([node("matmul", x, node("concat", b.weight((4, 3)), b.weight((4, 3)), axis=1))])
    g.constant_ids()                        # fill the id-keyed caches before pickling
    assert pickle.loads(pickle.dumps(g)).key() == g.key()
    # node ids differ in a fresh process: the concat of weights must still be found constant
    code = ("import pickle, sys; from tempo.superopt.fold import fold_constants; "
            "g = pickle.loads(sys.stdin.buffer.read()); "
            "print(sorted(fold_constants(g).op_counts()))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(g), capture_output=True,
                         check=True).stdout.decode()
    assert out.strip() == str(sorted(["input", "matmul", "weight"]))
