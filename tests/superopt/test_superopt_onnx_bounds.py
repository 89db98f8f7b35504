"""Clip, Pad and the Reduce ops at every opset form: imported exactly or passed through,
checked against onnx.reference.ReferenceEvaluator on the same model (onnxruntime for
negative pads, which the reference evaluator does not take)."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from tempo.superopt.onnx_import import import_model
from tempo.superopt.reference import evaluate

SHAPE = [2, 3, 4, 4]


def _model(op, inputs, consts, opset, **attrs):
    """x -> op -> Relu -> y, with the op's other operands as initializers ('' omitted)."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    nodes = [helper.make_node(op, ["x", *inputs], ["o"], **attrs), helper.make_node("Relu", ["o"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {vi.name: vi for vi in shape_inference.infer_shapes(model).graph.value_info}
    graph.output[0].CopyFrom(inferred.get("y", graph.output[0]))
    graph.output[0].name = "y"
    return model


def _run(model, x):
    """Every tensor of ``model`` on ``x``: onnx.reference's, or onnxruntime's where a Pad
    removes values."""
    if not any(n.op_type == "Pad" and any(v < 0 for v in _pad_values(model, n)) for n in model.graph.node):
        return ReferenceEvaluator(model).run(None, {"x": x}, intermediate=True)
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("o", "y")])
    engine = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {"x": x, **dict(zip(("o", "y"), engine.run(None, {"x": x})))}


def _pad_values(model, n):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    return list(attrs.get("pads", attrs.get("paddings", []))) + list(inits.get(n.input[1], [])
                                                                      if len(n.input) > 1 else [])


def _imported_ops(model) -> dict:
    """The graph's op counts; checks that the graph computes what onnx.reference computes,
    feeding the op's output where the op passed through."""
    g = import_model(model).graph
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(SHAPE) * 3).astype(np.float32)
    x[0, 0, 0, :2] = [np.inf, -np.inf]
    want = _run(model, x)
    feeds = {n.attr("name"): want[n.attr("name")] for n in g.inputs}
    assert "y" in g.output_names
    for name, got in zip(g.output_names, evaluate(g, feeds)):
        np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-6)
    return {k: v for k, v in g.op_counts().items() if k not in ("input", "relu")} | (
        {"passed": 1} if "o" in feeds else {})


F32 = np.float32
CLIP = [  # (opset, inputs, constants, attributes, imported ops)
    (6, [], {}, {"min": 0.0}, {"passed": 1}),          # max defaults to FLT_MAX: +inf is clamped
    (6, [], {}, {"min": 0.0, "max": float("inf")}, {}),  # a relu (merged with the next)
    (6, [], {}, {"min": float("-inf"), "max": float("inf")}, {}),
    (6, [], {}, {"min": -1.0, "max": 1.0}, {"passed": 1}),
    (11, ["lo"], {"lo": F32(0)}, {}, {}),
    (11, ["", "hi"], {"hi": F32(np.inf)}, {}, {}),       # '' omits min; nothing clamped
    (12, ["lo", ""], {"lo": F32(0)}, {}, {}),
    (13, ["", "hi"], {"hi": F32(6)}, {}, {"passed": 1}),
    (13, ["lo", "hi"], {"lo": F32(0), "hi": F32(6)}, {}, {"passed": 1}),
    (13, [], {}, {}, {}),
]


@pytest.mark.parametrize("opset, inputs, consts, attrs, ops", CLIP)
def test_clip_is_a_relu_or_the_identity_or_passes_through(opset, inputs, consts, attrs, ops):
    assert _imported_ops(_model("Clip", inputs, consts, opset, **attrs)) == ops


I64 = np.int64
PAD = [
    (10, [], {}, {"pads": [0, 0, 1, 1, 0, 0, 1, 1]}, {"passed": 1}),
    (10, [], {}, {"pads": [0, 0, -1, 0, 0, 0, 0, -2], "mode": "constant"}, {"slice": 2}),
    (10, [], {}, {"pads": [0] * 8, "mode": "reflect"}, {}),
    (11, ["p"], {"p": np.array([0, 0, 0, -1, 0, 0, 0, -1], I64)}, {}, {"slice": 1}),
    (11, ["p", "v"], {"p": np.array([0, 0, 1, 0, 0, 0, 0, 0], I64), "v": F32(2)}, {}, {"passed": 1}),
    (13, ["p"], {"p": np.array([0, 0, 0, -1, 0, 0, 0, -1], I64)}, {"mode": "edge"}, {"passed": 1}),
    (18, ["p", "", "ax"], {"p": np.array([-1, -1], I64), "ax": np.array([-1], I64)}, {}, {"slice": 1}),
    (19, ["p", "", "ax"], {"p": np.array([0, 0], I64), "ax": np.array([1], I64)}, {"mode": "wrap"}, {}),
]


@pytest.mark.parametrize("opset, inputs, consts, attrs, ops", PAD)
def test_pad_that_adds_nothing_is_the_identity_or_a_slice(opset, inputs, consts, attrs, ops):
    assert _imported_ops(_model("Pad", inputs, consts, opset, **attrs)) == ops


def _axes(op, opset, axes, consts, inputs):
    """The axes as an attribute or as an input, as ``op`` takes them at ``opset``."""
    if opset < (13 if op == "ReduceSum" else 18):
        return {"axes": axes} if axes is not None else {}
    if axes is not None:
        consts["axes"] = np.array(axes, I64)
        inputs.append("axes")
    return {}


REDUCE = [  # (op, opset, axes, keepdims, noop_with_empty_axes, imported ops)
    ("ReduceMean", 6, [2, 3], 1, None, {"avgpool": 1}),
    ("ReduceMean", 13, [-1, -2], 0, None, {"avgpool": 1, "reshape": 1}),
    ("ReduceMean", 18, [2, 3], 1, None, {"avgpool": 1}),
    ("ReduceMean", 18, None, 1, 1, {}),
    ("ReduceMean", 18, None, 1, 0, {"passed": 1}),
    ("ReduceMean", 11, [1], 1, None, {"passed": 1}),
    ("ReduceMax", 12, [2, 3], 0, None, {"maxpool": 1, "reshape": 1}),
    ("ReduceMax", 20, [2, 3], 1, None, {"maxpool": 1}),
    ("ReduceMin", 13, [2, 3], 1, None, {"passed": 1}),
    ("ReduceSum", 11, [2, 3], 1, None, {"passed": 1}),
    ("ReduceSum", 13, [], 1, 1, {}),
    ("ReduceSum", 13, None, 0, 0, {"passed": 1}),
    ("ReduceL2", 18, [2, 3], 1, None, {"passed": 1}),
    ("ReduceLogSumExp", 18, None, 1, 1, {"passed": 1}),
]


@pytest.mark.parametrize("op, opset, axes, keepdims, noop, ops", REDUCE)
def test_reduce_is_a_global_pool_the_identity_or_passes_through(op, opset, axes, keepdims, noop, ops):
    consts, inputs = {}, []
    attrs = {"keepdims": keepdims, **_axes(op, opset, axes, consts, inputs)}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    assert _imported_ops(_model(op, inputs, consts, opset, **attrs)) == ops


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceProd", "ReduceMax"])
@pytest.mark.parametrize("opset", [11, 18])
def test_reduce_over_an_axis_of_size_one_is_a_reshape(op, opset):
    global SHAPE
    shape, SHAPE = SHAPE, [2, 1, 4, 4]
    try:
        consts, inputs = {}, []
        attrs = {"keepdims": 0, **_axes(op, opset, [1], consts, inputs)}
        assert _imported_ops(_model(op, inputs, consts, opset, **attrs)) == {"reshape": 1}
    finally:
        SHAPE = shape
