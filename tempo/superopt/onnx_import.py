"""ONNX models to graphs.

Each supported ONNX op has an importer in :data:`IMPORTERS`; any other node is
kept verbatim as an ``opaque`` node (one per output) and named in the
warnings that :func:`import_model` returns, so the optimiser passes it
through untouched. Shapes must be static; ONNX shape inference supplies the
shapes of the opaque nodes' outputs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from tempo.errors import TempoError
from tempo.superopt.graph import Graph, Node, ShapeError, node


class OnnxImportError(TempoError):
    """An ONNX model this package cannot read."""


@dataclass
class _Ctx:
    values: dict[str, Node] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def get(self, name: str) -> Node:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            value = self.consts[name].astype(np.float32)
            key = f"c_{name}"
            self.weights[key] = value
            self.values[name] = node("weight", name=key, shape=value.shape)
            return self.values[name]
        raise OnnxImportError(f"tensor '{name}' is used before it is defined")

    def const(self, name: str, what: str) -> np.ndarray:
        if name not in self.consts:
            raise OnnxImportError(f"{what} must be a constant (initializer), '{name}' is not")
        return self.consts[name]


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _square(n: onnx.NodeProto, a: dict, key: str, default: int) -> int:
    values = list(a.get(key, [default, default]))
    if len(set(values)) != 1:
        raise _Unsupported(f"non-square {key} {values}")
    return int(values[0])


class _Unsupported(Exception):
    """This node's attributes are outside what the IR models; keep it opaque."""


def _conv(ctx, n, a):
    if a.get("dilations", [1, 1]) != [1, 1] or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise _Unsupported("dilated or auto-padded convolution")
    args = [ctx.get(i) for i in n.input if i]
    return [node("conv2d", *args, stride=_square(n, a, "strides", 1),
                 pad=_square(n, a, "pads", 0), groups=int(a.get("group", 1)))]


def _pool(op):
    def importer(ctx, n, a):
        if a.get("ceil_mode", 0) or (op == "avgpool" and a.get("pads") and
                                     not a.get("count_include_pad", 0)):
            raise _Unsupported("ceil mode or padding excluded from averages")
        k = _square(n, a, "kernel_shape", 1)
        return [node(op, ctx.get(n.input[0]), kernel=k, stride=_square(n, a, "strides", 1),
                     pad=_square(n, a, "pads", 0))]
    return importer


def _global_avgpool(ctx, n, a):
    x = ctx.get(n.input[0])
    if len(x.shape) != 4 or x.shape[2] != x.shape[3]:
        raise _Unsupported("global pooling over a non-square map")
    return [node("avgpool", x, kernel=x.shape[2], stride=x.shape[2])]


def _gemm(ctx, n, a):
    if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
        raise _Unsupported("scaled Gemm or transposed A")
    w = ctx.get(n.input[1])
    if a.get("transB", 0):
        w = node("transpose", w, perm=(1, 0))
    args = [ctx.get(n.input[0]), w]
    if len(n.input) > 2 and n.input[2]:
        bias = ctx.get(n.input[2])
        if bias.shape != (w.shape[1],):
            raise _Unsupported("Gemm bias that is not one row")
        args.append(bias)
    return [node("matmul", *args)]


def _reshape(ctx, n, a):
    x = ctx.get(n.input[0])
    target = [int(d) for d in ctx.const(n.input[1], "Reshape's shape")]
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(x.shape)) // max(known, 1)
    return [node("reshape", x, shape=tuple(target))]


def _flatten(ctx, n, a):
    x = ctx.get(n.input[0])
    axis = int(a.get("axis", 1)) % max(len(x.shape), 1)
    return [node("reshape", x, shape=(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))]


def _split(ctx, n, a):
    x = ctx.get(n.input[0])
    axis = int(a.get("axis", 0))
    if len(n.input) > 1 and n.input[1]:
        sizes = [int(s) for s in ctx.const(n.input[1], "Split's sizes")]
    else:
        sizes = [x.shape[axis] // len(n.output)] * len(n.output)
    starts = np.cumsum([0, *sizes])
    return [node("slice", x, axis=axis, start=int(s), end=int(e)) for s, e in zip(starts, starts[1:])]


def _slice(ctx, n, a):
    x = ctx.get(n.input[0])
    starts, ends = ctx.const(n.input[1], "Slice's starts"), ctx.const(n.input[2], "Slice's ends")
    axes = ctx.const(n.input[3], "Slice's axes") if len(n.input) > 3 and n.input[3] else [0]
    steps = ctx.const(n.input[4], "Slice's steps") if len(n.input) > 4 and n.input[4] else [1]
    if len(starts) != 1 or int(steps[0]) != 1:
        raise _Unsupported("multi-axis or strided Slice")
    axis = int(axes[0])
    size = x.shape[axis]
    start, end = (int(np.clip(v + size if v < 0 else v, 0, size)) for v in (starts[0], ends[0]))
    return [node("slice", x, axis=axis, start=start, end=end)]


def _layernorm(ctx, n, a):
    x = ctx.get(n.input[0])
    if int(a.get("axis", -1)) not in (-1, len(x.shape) - 1) or len(n.output) > 1 and any(n.output[1:]):
        raise _Unsupported("LayerNormalization over more than the last axis")
    return [node("layernorm", x, ctx.get(n.input[1]), ctx.get(n.input[2]),
                 eps=float(a.get("epsilon", 1e-5)))]


def _gelu(ctx, n, a):
    if a.get("approximate", b"none") not in (b"none", "none"):
        raise _Unsupported("tanh-approximated Gelu")
    return [node("gelu", ctx.get(n.input[0]))]


def _simple(op, **fixed):
    def importer(ctx, n, a):
        return [node(op, *(ctx.get(i) for i in n.input if i), **fixed)]
    return importer


IMPORTERS: dict[str, Callable] = {
    "Conv": _conv,
    "MatMul": _simple("matmul"),
    "Gemm": _gemm,
    "Add": _simple("add"), "Sub": _simple("sub"), "Mul": _simple("mul"), "Div": _simple("div"),
    "Relu": _simple("relu"), "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"),
    "Exp": _simple("exp"), "Sqrt": _simple("sqrt"),
    "Gelu": _gelu,
    "Softmax": lambda ctx, n, a: [node("softmax", ctx.get(n.input[0]), axis=int(a.get("axis", -1)))],
    "LayerNormalization": _layernorm,
    "BatchNormalization": lambda ctx, n, a: [node("batchnorm", *(ctx.get(i) for i in n.input[:5]),
                                                  eps=float(a.get("epsilon", 1e-5)))],
    "MaxPool": _pool("maxpool"), "AveragePool": _pool("avgpool"),
    "GlobalAveragePool": _global_avgpool,
    "Concat": lambda ctx, n, a: [node("concat", *(ctx.get(i) for i in n.input), axis=int(a["axis"]))],
    "Split": _split,
    "Slice": _slice,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": lambda ctx, n, a: [node("transpose", ctx.get(n.input[0]), perm=tuple(
        a.get("perm", range(len(ctx.get(n.input[0]).shape))[::-1])))],
    "Identity": lambda ctx, n, a: [ctx.get(n.input[0])],
}


def _static_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    dims = vi.type.tensor_type.shape.dim
    if not vi.type.tensor_type.HasField("shape") or any(not d.HasField("dim_value") for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _opaque(ctx: _Ctx, n: onnx.NodeProto) -> list[Node]:
    proto = n.SerializeToString()
    outs = []
    for index, name in enumerate(n.output):
        shape = ctx.shapes.get(name)
        if shape is None:
            raise OnnxImportError(f"cannot infer the shape of '{name}', output of unsupported "
                                  f"{n.op_type} node '{n.name}'")
        outs.append(node("opaque", *(ctx.get(i) for i in n.input if i), proto=proto, index=index,
                         shape=shape))
    return outs


def import_model(model: onnx.ModelProto) -> tuple[Graph, list[str]]:
    """The graph of ``model`` and warnings naming the ONNX ops kept verbatim."""
    try:
        model = shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several unrelated types here
        raise OnnxImportError(f"ONNX shape inference failed: {exc}") from None
    g = model.graph
    ctx = _Ctx()
    for init in g.initializer:
        ctx.consts[init.name] = numpy_helper.to_array(init)
    for vi in [*g.value_info, *g.output]:
        shape = _static_shape(vi)
        if shape is not None:
            ctx.shapes[vi.name] = shape
    inputs = []
    for vi in g.input:
        if vi.name in ctx.consts:
            continue
        shape = _static_shape(vi)
        if shape is None:
            raise OnnxImportError(f"input '{vi.name}' has a dynamic shape; export it with static sizes")
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise OnnxImportError(f"input '{vi.name}' is not float32")
        ctx.values[vi.name] = node("input", name=vi.name, shape=shape)
        inputs.append(ctx.values[vi.name])
    kept: list[str] = []
    for n in g.node:
        if n.op_type == "Constant" and not n.domain:
            ctx.consts[n.output[0]] = numpy_helper.to_array(_attrs(n)["value"])
            continue
        outs = _import_node(ctx, n, kept)
        for name, value in zip(n.output, outs):
            ctx.values[name] = value
    warnings = [f"passing through unsupported ONNX operator {op} ({count} node"
                f"{'s' if count > 1 else ''})" for op, count in sorted(_count(kept).items())]
    graph = Graph(tuple(inputs), tuple(ctx.get(o.name) for o in g.output), ctx.weights,
                  tuple(o.name for o in g.output))
    return graph, warnings


def _import_node(ctx: _Ctx, n: onnx.NodeProto, kept: list[str]) -> list[Node]:
    importer = IMPORTERS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
    if importer is not None:
        try:
            return importer(ctx, n, _attrs(n))
        except (_Unsupported, ShapeError):
            pass
    kept.append(n.op_type)
    return _opaque(ctx, n)


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def load(path: str) -> tuple[Graph, list[str], onnx.ModelProto]:
    """Read an ONNX file: its graph, the pass-through warnings and the model itself."""
    try:
        model = onnx.load(path)
    except FileNotFoundError:
        raise OnnxImportError(f"no such ONNX file '{path}'") from None
    except Exception as exc:  # protobuf decode errors have no common base
        raise OnnxImportError(f"'{path}' is not a readable ONNX model ({type(exc).__name__})") from None
    graph, warnings = import_model(model)
    return graph, warnings, model
