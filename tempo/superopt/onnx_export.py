"""Graphs to ONNX models.

Each op has an emitter in :data:`EMITTERS` that writes one or a few ONNX
nodes through a :class:`Writer` at a given opset, raising
:class:`Inexpressible` where that opset cannot express the op.
:func:`export_model` writes a whole graph as a new model (constant-folded
first, so weight-only ops become initializers); :mod:`tempo.superopt.onnx_splice`
uses the same emitters to write only a rewrite into an existing model.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tempo.errors import TempoError
from tempo.files import write_bytes_atomic
from tempo.superopt.fold import fold_constants
from tempo.superopt.graph import Graph

OPSET = 20
ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


class Inexpressible(TempoError):
    """A graph node that the model's opset cannot express as ONNX nodes."""


class Writer:
    """Collects the ONNX nodes and initializers written for graph nodes at one opset; fresh
    names avoid ``taken`` (the names a model already uses)."""

    def __init__(self, opset: int = OPSET, taken: set[str] | None = None, prefix: str = "") -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0
        self.opset = opset
        self.taken = taken if taken is not None else set()
        self.prefix = prefix

    def fresh(self, hint: str) -> str:
        """A name no tensor or node of the model has."""
        while True:
            self.count += 1
            name = f"{self.prefix}{hint}_{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def const(self, value, dtype=np.float32) -> str:
        name = self.fresh("const")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def emit(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.fresh(op_type), **attrs))
        return out

    def needs(self, opset: int, what: str) -> None:
        """Raise :class:`Inexpressible` unless the writer's opset is at least ``opset``."""
        if self.opset < opset:
            raise Inexpressible(f"{what} needs opset {opset}, the model has {self.opset}")


def _with_act(w: Writer, act: str, value: str, out: str) -> str:
    if act == "none":
        return w.emit("Identity", [value], out)
    return w.emit(ACT[act], [value], out)


def _conv2d(w, n, ins, out):
    a = dict(n.attrs)
    p = a["pad"]
    conv = w.emit("Conv", ins, out if a["act"] == "none" else None, strides=[a["stride"]] * 2,
                  pads=[p] * 4, group=a["groups"])
    return conv if a["act"] == "none" else _with_act(w, a["act"], conv, out)


def _matmul(w, n, ins, out):
    act = n.attr("act")
    final = out if act == "none" else None
    if len(ins) == 3 and len(n.src[0].shape) == 2 and len(n.src[1].shape) == 2:
        value = w.emit("Gemm", ins, final)
    elif len(ins) == 3:
        value = w.emit("Add", [w.emit("MatMul", ins[:2]), ins[2]], final)
    else:
        value = w.emit("MatMul", ins, final)
    return value if act == "none" else _with_act(w, act, value, out)


def _pool(op_type):
    def emit(w, n, ins, out):
        a = dict(n.attrs)
        extra = {"count_include_pad": 1} if op_type == "AveragePool" else {}
        return w.emit(op_type, ins, out, kernel_shape=[a["kernel"]] * 2, strides=[a["stride"]] * 2,
                      pads=[a["pad"]] * 4, **extra)
    return emit


def _bn_scale(w, eps, s, v, out=None):
    return w.emit("Div", [s, w.emit("Sqrt", [w.emit("Add", [v, w.const(eps)])])], out)


def _slice(w, n, ins, out):
    a = dict(n.attrs)
    if w.opset < 10:
        return w.emit("Slice", ins, out, starts=[a["start"]], ends=[a["end"]], axes=[a["axis"]])
    return w.emit("Slice", [ins[0], w.const([a["start"]], np.int64), w.const([a["end"]], np.int64),
                            w.const([a["axis"]], np.int64)], out)


def _enlarge(w, n, ins, out):
    ph, pw = (n.attr("size") - n.src[0].shape[2]) // 2, (n.attr("size") - n.src[0].shape[3]) // 2
    if w.opset < 11:
        return w.emit("Pad", ins, out, pads=[0, 0, ph, pw, 0, 0, ph, pw])
    return w.emit("Pad", [ins[0], w.const([0, 0, ph, pw, 0, 0, ph, pw], np.int64)], out)


def _reshape(w, n, ins, out):
    if w.opset < 5:
        return w.emit("Reshape", ins, out, shape=list(n.attr("shape")))
    return w.emit("Reshape", [ins[0], w.const(n.attr("shape"), np.int64)], out)


def _softmax(w, n, ins, out):
    if w.opset < 13 and n.attr("axis") != -1:
        raise Inexpressible("a Softmax over a middle axis needs opset 13")
    return w.emit("Softmax", ins, out, axis=n.attr("axis") % len(n.shape))


def _layernorm(w, n, ins, out):
    w.needs(17, "LayerNormalization")
    return w.emit("LayerNormalization", ins, out, axis=-1, epsilon=n.attr("eps"))


def _gelu(w, n, ins, out):
    w.needs(20, "Gelu")
    return w.emit("Gelu", ins, out)


def _simple(op_type, **fixed):
    return lambda w, n, ins, out: w.emit(op_type, ins, out, **fixed)


EMITTERS: dict[str, Callable] = {
    "conv2d": _conv2d,
    "matmul": _matmul,
    **{op: _simple(op.capitalize()) for op in ("relu", "sigmoid", "tanh", "exp", "sqrt",
                                               "add", "sub", "mul", "div")},
    "gelu": _gelu,
    "maxpool": _pool("MaxPool"),
    "avgpool": _pool("AveragePool"),
    "batchnorm": lambda w, n, ins, out: w.emit("BatchNormalization", ins, out,
                                               epsilon=n.attr("eps")),
    "bn_scale": lambda w, n, ins, out: _bn_scale(w, n.attr("eps"), *ins, out),
    "bn_shift": lambda w, n, ins, out: w.emit("Sub", [ins[1], w.emit("Mul", [
        ins[2], _bn_scale(w, n.attr("eps"), ins[0], ins[3])])], out),
    "layernorm": _layernorm,
    "softmax": _softmax,
    "enlarge": _enlarge,
    "concat": lambda w, n, ins, out: w.emit("Concat", ins, out, axis=n.attr("axis")),
    "slice": _slice,
    "reshape": _reshape,
    "transpose": lambda w, n, ins, out: w.emit("Transpose", ins, out, perm=list(n.attr("perm"))),
}


def export_model(graph: Graph) -> onnx.ModelProto:
    """An ONNX model computing ``graph`` at opset :data:`OPSET` (weights as initializers,
    outputs named as the graph's)."""
    g = fold_constants(graph)
    w = Writer()
    names: dict[int, str] = {}
    wanted = {id(o): name for o, name in zip(g.outputs, g.output_names)}
    for n in g.topo():
        if n.op == "input":
            names[id(n)] = n.attr("name")
        elif n.op in ("weight", "scalar"):
            value = g.weights[n.attr("name")] if n.op == "weight" else n.attr("value")
            names[id(n)] = w.const(value)
        else:
            names[id(n)] = EMITTERS[n.op](w, n, [names[id(s)] for s in n.src], wanted.pop(id(n), None))
    for o, name in zip(g.outputs, g.output_names):
        if names[id(o)] != name:
            w.emit("Identity", [names[id(o)]], name)
    graph_proto = helper.make_graph(
        w.nodes, "tempo_superopt",
        [helper.make_tensor_value_info(n.attr("name"), TensorProto.FLOAT, n.shape) for n in g.inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, o.shape)
         for o, name in zip(g.outputs, g.output_names)],
        w.inits)
    return helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="tempo.superopt")


def save(model: onnx.ModelProto, path: str) -> None:
    """Write ``model`` atomically (see :func:`tempo.files.write_bytes_atomic`)."""
    write_bytes_atomic(path, model.SerializeToString())
