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
    back, warnings = import_model(model)
    assert warnings == []
    feeds = random_feeds(g)
    for a, b in zip(evaluate(back, feeds), evaluate(g, feeds)):
        _close(a, b)


def _model(nodes, inits, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_ops_pass_through_with_a_warning_naming_them():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Erf", ["h"], ["e"]),
             helper.make_node("Relu", ["e"], ["y"])]
    model = _model(nodes, [w], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    g, warnings = import_model(model)
    assert warnings == ["passing through unsupported ONNX operator Erf (1 node)"]
    assert g.op_counts()["opaque"] == 1
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _close(evaluate(g, feeds)[0], want)
    _close(ReferenceEvaluator(export_model(g)).run(None, feeds)[0], want)


def test_gemm_split_and_reshape_import():
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2, 4], np.int64), "sizes"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "shape")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
             helper.make_node("Split", ["g", "sizes"], ["s1", "s2"], axis=1),
             helper.make_node("Reshape", ["s2", "shape"], ["y"])]
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                   [helper.make_tensor_value_info("s1", TensorProto.FLOAT, [3, 2]),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], opset=18)
    g, warnings = import_model(model)
    assert warnings == [] and g.output_names == ("s1", "y")
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32)}
    for a, b in zip(evaluate(g, feeds), ReferenceEvaluator(model).run(None, feeds)):
        _close(a, b)


def test_dynamic_shapes_and_bad_files_are_errors(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    with pytest.raises(OnnxImportError, match="input 'x' has a dynamic shape"):
        import_model(model)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    with pytest.raises(OnnxImportError, match="bad.onnx"):
        load(str(bad))


def test_save_is_atomic_and_readable(tmp_path):
    path = tmp_path / "m.onnx"
    save(export_model(build("resnext", scale="small")), str(path))
    assert onnx.load(str(path)).graph.node
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
