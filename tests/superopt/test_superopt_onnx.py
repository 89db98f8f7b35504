"""ONNX import and export, checked with onnx.reference.ReferenceEvaluator."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from superopt_graphs import every_op_graph
from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.onnx_export import export_model, save
from tempo.superopt.onnx_import import OnnxImportError, import_model, load
from tempo.superopt.reference import evaluate, random_feeds


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_exported_workloads_run_in_onnx_reference(name):
    g = build(name, scale="small")
    feeds = random_feeds(g)
    got = ReferenceEvaluator(export_model(g)).run(None, feeds)
    _close(got[0], evaluate(g, feeds)[0])


def test_every_op_round_trips():
    g = every_op_graph()
    model = export_model(g)
    onnx.checker.check_model(model)
    imported = import_model(model)
    assert imported.warnings == []
    feeds = random_feeds(g)
    for a, b in zip(evaluate(imported.graph, feeds), evaluate(g, feeds)):
        _close(a, b)


def _model(nodes, inits, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_unsupported_ops_pass_through_and_cut_the_region():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Erf", ["h"], ["e"]),
             helper.make_node("Relu", ["e"], ["y"])]
    model = _model(nodes, [w], [_float("x", [4, 8])], [_float("y", [4, 8])])
    imported = import_model(model)
    assert imported.warnings == ["passing through ONNX operator Erf (1 node)"]
    g = imported.graph
    assert sorted(n.attr("name") for n in g.inputs) == ["e", "x"] and g.output_names == ("h", "y")
    assert "opaque" not in g.op_counts()
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
    got = evaluate(g, {"x": feeds["x"], "e": want["e"]})
    _close(got[0], want["h"])
    _close(got[1], want["y"])


def test_non_float_values_pass_through_and_constants_keep_their_types():
    nodes = [helper.make_node("Constant", [], ["k"], value_float=2.0),
             helper.make_node("Mul", ["x", "k"], ["m"]),
             helper.make_node("ArgMax", ["m"], ["a"], axis=1),
             helper.make_node("Clip", ["m", "", "k"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, [], [_float("x", [2, 3])],
                   [helper.make_tensor_value_info("a", TensorProto.INT64, [2, 1]), _float("y", [2, 3])])
    imported = import_model(model)
    assert imported.graph.output_names == ("m", "y")
    assert imported.graph.weights["k"].dtype == np.float32
    assert "passing through ONNX operator ArgMax (1 node)" in imported.warnings


@pytest.mark.parametrize("opset, imported_as", [(11, None), (13, "softmax")])
def test_softmax_is_imported_only_with_its_opsets_meaning(opset, imported_as):
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [], [_float("x", [2, 3, 4])], [_float("y", [2, 3, 4])], opset=opset)
    ops = import_model(model).graph.op_counts()
    assert ops.get("softmax") == (1 if imported_as else None)


def test_training_batchnorm_and_dilated_pools_pass_through():
    c = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n", "rm", "rv"],
                              training_mode=1),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], dilations=[2, 2]),
             helper.make_node("Relu", ["p"], ["y"])]
    model = _model(nodes, c, [_float("x", [1, 3, 6, 6])], [_float("y", [1, 3, 4, 4])], opset=15)
    assert import_model(model).graph.op_counts() == {"input": 2, "relu": 2}


def test_gemm_split_and_reshape_import():
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2, 4], np.int64), "sizes"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "shape")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
             helper.make_node("Split", ["g", "sizes"], ["s1", "s2"], axis=1),
             helper.make_node("Reshape", ["s2", "shape"], ["y"])]
    model = _model(nodes, inits, [_float("x", [3, 4])], [_float("s1", [3, 2]), _float("y", [3, 4])],
                   opset=18)
    imported = import_model(model)
    g = imported.graph
    assert imported.warnings == [] and g.output_names == ("s1", "y")
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32)}
    for a, b in zip(evaluate(g, feeds), ReferenceEvaluator(model).run(None, feeds)):
        _close(a, b)


def test_dynamic_shapes_pass_through_and_bad_files_are_errors(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [],
                   [_float("x", ["batch", 4])], [_float("y", ["batch", 4])])
    imported = import_model(model)
    assert imported.graph.outputs == () and imported.warnings == [
        "passing through ONNX operator Relu (1 node)"]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    with pytest.raises(OnnxImportError, match="bad.onnx"):
        load(str(bad))


def test_save_is_atomic_and_readable(tmp_path):
    path = tmp_path / "m.onnx"
    save(export_model(build("resnext", scale="small")), str(path))
    assert onnx.load(str(path)).graph.node
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_sum_of_three_is_two_adds_with_broadcasting():
    nodes = [helper.make_node("Sum", ["a", "b", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [], [_float("a", [2, 3]), _float("b", [2, 3]), _float("c", [3])],
                   [_float("y", [2, 3])], opset=13)
    g = import_model(model).graph
    assert g.op_counts() == {"input": 3, "add": 2, "relu": 1}
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal((2, 3)), "b": rng.standard_normal((2, 3)),
             "c": rng.standard_normal(3)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    _close(evaluate(g, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0])
