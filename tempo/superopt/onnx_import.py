"""ONNX models to graphs: the region of a model the rules can use.

:func:`import_model` walks the model's nodes in order. A node becomes graph
nodes when its op has an importer (:mod:`tempo.superopt.onnx_importers`)
that can express it exactly at the model's opset, every tensor it reads or
writes is float32 with a static shape, and the shapes the IR infers are the
ones ONNX infers. Every other node passes through: it stays in the model
verbatim, its float32 outputs that imported nodes read become graph inputs
(named as the tensors), and the imported values it reads become graph
outputs. Constant operands (initializers, ``Constant`` nodes, and nodes that
read only constants, such as ``ConstantOfShape`` or ``Shape`` of a static
tensor) are computed once with ONNX's reference evaluator in the model's
opsets, keeping their element types.

The result (:class:`Imported`) remembers which ONNX node made which graph
value, so :mod:`tempo.superopt.onnx_splice` can write back only what a
rewrite changed. A model that cannot be read at all raises
:class:`OnnxImportError`; anything else imports, possibly as an empty region.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from tempo.errors import TempoError
from tempo.superopt.graph import Graph, Node, ShapeError, node
from tempo.superopt.onnx_importers import IMPORTERS, Unsure

FLOAT = onnx.TensorProto.FLOAT
# ops whose output is not a function of their inputs: never computed ahead of time
RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
          "Multinomial", "Dropout"}
CONST_LIMIT = 1 << 24   # elements: larger constant operands are left to the model


class OnnxImportError(TempoError):
    """An ONNX model this package cannot read."""


@dataclass
class Imported:
    """The importable region of a model as a graph, and where each graph value came from.

    ``produced[i]`` lists ``(tensor name, graph node)`` for the outputs of the
    model's node ``i`` when it was imported; ``origin`` names the tensor each
    imported graph node was first made for."""

    model: onnx.ModelProto
    graph: Graph
    warnings: list[str]
    produced: dict[int, list[tuple[str, Node]]] = field(default_factory=dict)
    origin: dict[int, str] = field(default_factory=dict)
    opset: int = 0


@dataclass
class _Ctx:
    opset: int
    types: dict[str, tuple[int, tuple[int, ...] | None]]
    values: dict[str, Node] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def get(self, name: str) -> Node:
        """The graph value of float32 tensor ``name`` (a graph input if nothing imported made it)."""
        if name in self.values:
            return self.values[name]
        if name in self.consts and self.consts[name].dtype == np.float32:
            self.weights[name] = self.consts[name]
            self.values[name] = node("weight", name=name, shape=self.consts[name].shape)
            return self.values[name]
        elem, shape = self.types.get(name, (0, None))
        if not name or elem != FLOAT or shape is None:
            raise Unsure(f"tensor '{name}' is not float32 with a static shape")
        self.values[name] = node("input", name=name, shape=shape)
        return self.values[name]

    def const(self, name: str) -> np.ndarray:
        """The value of constant operand ``name`` (Unsure when it is computed from inputs)."""
        if name not in self.consts:
            raise Unsure(f"operand '{name}' is not a constant")
        return self.consts[name]


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _static(t: onnx.TypeProto) -> tuple[int, tuple[int, ...] | None]:
    if not t.HasField("tensor_type"):
        return 0, None
    tt = t.tensor_type
    if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return tt.elem_type, None
    return tt.elem_type, tuple(int(d.dim_value) for d in tt.shape.dim)


def _types(model: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...] | None]]:
    g = model.graph
    types = {vi.name: _static(vi.type) for vi in [*g.input, *g.value_info, *g.output]}
    for init in g.initializer:
        types[init.name] = (init.data_type, tuple(int(d) for d in init.dims))
    return types


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX domain."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def used_names(n: onnx.NodeProto) -> set[str]:
    """The tensors ``n`` reads, including those its subgraphs read from the enclosing scope."""
    names = {i for i in n.input if i}
    for a in n.attribute:
        for g in [a.g] if a.HasField("g") else list(a.graphs):
            for inner in g.node:
                names |= used_names(inner)
    return names


def _constant_value(n: onnx.NodeProto, consts: dict, model: onnx.ModelProto) -> list | None:
    """The outputs of ``n`` when they follow from constants alone, else None."""
    if n.domain not in ("", "ai.onnx") or n.op_type in RANDOM or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
        return None
    if any(i and i not in consts for i in n.input) or sum(
            consts[i].size for i in n.input if i) > CONST_LIMIT:
        return None
    if n.op_type == "ConstantOfShape" and np.prod(consts[n.input[0]]) > CONST_LIMIT:
        return None
    from onnx.reference import ReferenceEvaluator

    inputs = [i for i in n.input if i]
    graph = helper.make_graph([n], "const", [helper.make_tensor_value_info(
        i, helper.np_dtype_to_tensor_dtype(consts[i].dtype), consts[i].shape) for i in inputs],
        [helper.make_tensor_value_info(o, 0, None) for o in n.output if o])
    probe = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    try:
        values = ReferenceEvaluator(probe).run(None, {i: consts[i] for i in inputs})
    except Exception:  # an evaluator that cannot run the node: the node is not a constant
        return None
    if any(not isinstance(v, np.ndarray) or v.size > CONST_LIMIT for v in values):
        return None
    return values


def _shape_value(n: onnx.NodeProto, types: dict) -> list | None:
    """Shape of a tensor whose shape is static, as a constant."""
    if n.op_type != "Shape" or n.domain not in ("", "ai.onnx"):
        return None
    shape = types.get(n.input[0], (0, None))[1]
    if shape is None:
        return None
    a = _attrs(n)
    start, end = int(a.get("start", 0)), a.get("end")
    return [np.array(shape[slice(start, None if end is None else int(end))], dtype=np.int64)]


def _infer(model: onnx.ModelProto, warnings: list[str]) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several unrelated types here
        warnings.append(f"ONNX shape inference failed ({exc}); every node passes through")
        return model


def import_model(model: onnx.ModelProto) -> Imported:
    """The importable region of ``model`` (warnings name the op types passed through)."""
    warnings: list[str] = []
    inferred = _infer(model, warnings)
    ctx = _Ctx(default_opset(model), _types(inferred))
    ctx.consts.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    graph_inputs = {vi.name for vi in model.graph.input} - set(ctx.consts)
    result = Imported(model, Graph((), ()), warnings, opset=ctx.opset)
    passed: dict[str, int] = {}
    readers: set[str] = {o.name for o in model.graph.output}
    for index, n in enumerate(model.graph.node):
        values = _shape_value(n, ctx.types) or _constant_value(n, ctx.consts, model)
        if values is not None:
            ctx.consts.update({o: np.asarray(v) for o, v in zip(n.output, values) if o})
        outs = None if values is not None or "shape inference failed" in "".join(warnings) \
            else _import_node(ctx, n)
        if outs is None:
            passed[n.op_type] = passed.get(n.op_type, 0) + 1
            readers |= used_names(n)
            continue
        result.produced[index] = [(o, v) for o, v in zip(n.output, outs) if o]
        for name, value in result.produced[index]:
            result.origin.setdefault(id(value), name)
            ctx.values[name] = value
    result.graph = _region(ctx, readers, graph_inputs)
    warnings.extend(f"passing through ONNX operator {op} ({count} node{'s' if count > 1 else ''})"
                    for op, count in sorted(passed.items()))
    return result


def _import_node(ctx: _Ctx, n: onnx.NodeProto) -> list[Node] | None:
    importer = IMPORTERS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
    if importer is None or any(ctx.types.get(o, (0,))[0] != FLOAT for o in n.output if o):
        return None
    known = dict(ctx.values)
    try:
        outs = importer(ctx, n, _attrs(n))
    except (Unsure, ShapeError, KeyError, IndexError, ValueError):
        ctx.values = known
        return None
    if len(outs) != len(n.output) or any(
            o and ctx.types.get(o, (0, None))[1] != v.shape for o, v in zip(n.output, outs)):
        ctx.values = known
        return None
    return outs


def _region(ctx: _Ctx, readers: set[str], graph_inputs: set[str]) -> Graph:
    """The graph whose outputs are the imported values that pass-through nodes or the model read."""
    names = sorted(name for name in readers if name in ctx.values
                   and ctx.values[name].op not in ("input", "weight"))
    outputs = tuple(ctx.values[name] for name in names)
    graph = Graph((), outputs, dict(ctx.weights), tuple(names))
    inputs = tuple(n for n in graph.topo() if n.op == "input")
    used = {n.attr("name") for n in graph.topo() if n.op == "weight"}
    return Graph(inputs, outputs, {k: v for k, v in ctx.weights.items() if k in used}, tuple(names))


def load(path: str) -> tuple[Graph, list[str], onnx.ModelProto]:
    """Read an ONNX file: its region's graph, the pass-through warnings and the model
    (:func:`import_model`)."""
    try:
        model = onnx.load(path)
    except FileNotFoundError:
        raise OnnxImportError(f"no such ONNX file '{path}'") from None
    except Exception as exc:  # protobuf decode errors have no common base
        raise OnnxImportError(f"'{path}' is not a readable ONNX model ({type(exc).__name__}: "
                              f"{exc})") from None
    imported = import_model(model)
    return imported.graph, imported.warnings, model
