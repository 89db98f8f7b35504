"""Splicing an optimised region back into its model, verification, and the input kept."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tempo.cli import main
from tempo.superopt import onnx_optimize
from tempo.superopt.onnx_optimize import optimize_model
from tempo.superopt.onnx_run import run_model, same_values, verify


def _conv_bn_model(opset: int = 13) -> onnx.ModelProto:
    """conv -> batchnorm -> Erf (passed through) -> conv -> relu, with metadata and a
    second opset import."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
             [("w1", (8, 4, 3, 3)), ("w2", (8, 8, 1, 1)), ("b2", (8,)), ("s", (8,)), ("b", (8,)),
              ("m", (8,))]]
    inits.append(numpy_helper.from_array(rng.random(8).astype(np.float32) + 0.5, "v"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], name="bn"),
             helper.make_node("Erf", ["n1"], ["e"], name="erf"),
             helper.make_node("Conv", ["e", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("Relu", ["c2"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    helper.set_model_props(model, {"author": "tests"})
    return model


def test_a_rewrite_replaces_only_its_subgraph():
    model = _conv_bn_model()
    result = optimize_model(model, "greedy", 10.0)
    assert result.rewritten, result.reason
    written = result.model
    onnx.checker.check_model(written, full_check=True)
    assert [n.op_type for n in written.graph.node].count("BatchNormalization") == 0
    erf = next(n for n in written.graph.node if n.op_type == "Erf")
    assert erf.SerializeToString() == model.graph.node[2].SerializeToString()
    assert written.opset_import == model.opset_import
    assert written.metadata_props == model.metadata_props
    assert [o.name for o in written.graph.output] == ["y"]
    assert {"s", "b", "m", "v"}.isdisjoint(t.name for t in written.graph.initializer)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)}
    assert same_values(run_model(model, feeds)[1], run_model(written, feeds)[1])


def test_a_model_no_rule_matches_is_written_back_byte_for_byte(tmp_path, capsys):
    nodes = [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("ArgMax", ["e"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 1])])
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]).SerializeToString())
    assert main(["superopt", str(src), "-o", str(dst), "--budget-seconds", "5"]) == 0
    assert dst.read_bytes() == src.read_bytes()
    assert "input written unchanged; no rule matches" in capsys.readouterr().out


def test_verify_names_what_is_wrong():
    model = _conv_bn_model()
    feeds = {"x": np.ones((1, 4, 8, 8), np.float32)}
    assert verify(model, model, feeds) is None
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    wrong.graph.node[4].op_type = "Sigmoid"
    assert "outputs differ" in verify(wrong, model, feeds)
    invalid = onnx.ModelProto()
    invalid.CopyFrom(model)
    invalid.graph.node[4].input[0] = "nowhere"
    assert "onnx.checker rejects it" in verify(invalid, model, feeds)


def test_a_wrong_splice_keeps_the_input_with_a_warning(monkeypatch):
    def broken(imported, graph):
        bad = onnx.ModelProto()
        bad.CopyFrom(imported.model)
        bad.graph.node[4].op_type = "Sigmoid"
        return bad

    monkeypatch.setattr(onnx_optimize, "splice", broken)
    result = optimize_model(_conv_bn_model(), "greedy", 10.0)
    assert not result.rewritten
    assert any("outputs differ" in w and "written unchanged" in w for w in result.warnings)


@pytest.mark.parametrize("opset", [9, 11])
def test_old_opsets_get_nodes_of_their_own_opset(opset):
    result = optimize_model(_conv_bn_model(opset), "greedy", 10.0)
    assert result.rewritten, result.reason
    assert result.model.opset_import[0].version == opset
    onnx.checker.check_model(result.model, full_check=True)
