"""Per-op importers from ONNX nodes to graph nodes, one per op type, opset-aware.

:data:`IMPORTERS` maps an ONNX op type to ``importer(ctx, node, attrs) -> [Node]``
(one graph node per ONNX output). An importer handles every attribute of
every opset version of its op that the IR can express exactly, and raises
:class:`Unsure` for anything else (a dilated pool, an opset-11 Softmax over a
middle axis, a training-mode batch norm, a LayerNormalization without bias);
the caller then passes that node through verbatim. ``ctx`` gives the
operands (:meth:`get` for float32 tensors, :meth:`const` for constant
operands read as attributes) and ``ctx.opset``, the model's version of the
default domain.

Clip, Pad and the Reduce ops import only where the IR has their exact
meaning: a Clip to [0, +inf] is a relu and an unbounded one the identity
(an omitted bound is no bound, as onnx.reference computes it); a Pad that
adds nothing is the identity and one that only removes (negative pads,
constant mode) is a slice; a Reduce over axes of size 1 is the identity or
a reshape (and so is one with no axes and ``noop_with_empty_axes``, for the
reductions that are the identity on one value), and a ReduceMean or
ReduceMax over the two spatial axes of a square map is a global pool.
Everything else of theirs passes through.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tempo.superopt.graph import node


class Unsure(Exception):
    """The IR cannot express this node exactly; it stays a verbatim ONNX node."""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _same(values, what: str) -> int:
    values = [int(v) for v in values]
    if len(set(values)) != 1:
        raise Unsure(f"non-uniform {what} {values}")
    return values[0]


def _window_2d(ctx, n, a, rank: int = 4) -> dict:
    """kernel, stride and pad of a 2-D conv or pool without dilation or automatic padding."""
    x = ctx.get(n.input[0])
    if len(x.shape) != rank:
        raise Unsure("not a 2-D window")
    if _text(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        raise Unsure("SAME auto padding")
    if any(int(d) != 1 for d in a.get("dilations", [1, 1])) or a.get("ceil_mode", 0):
        raise Unsure("dilation or ceil mode")
    pads = a.get("pads", [0] * 4) if _text(a.get("auto_pad", "NOTSET")) == "NOTSET" else [0] * 4
    return {"stride": _same(a.get("strides", [1, 1]), "strides"), "pad": _same(pads, "pads")}


def _conv(ctx, n, a):
    w = ctx.get(n.input[1])
    window = _window_2d(ctx, n, a)
    if "kernel_shape" in a and list(a["kernel_shape"]) != list(w.shape[2:]):
        raise Unsure("kernel_shape differs from the weight's")
    args = [ctx.get(i) for i in n.input if i]
    return [node("conv2d", *args, groups=int(a.get("group", 1)), **window)]


def _pool(op: str):
    def importer(ctx, n, a):
        if len([o for o in n.output if o]) > 1:
            raise Unsure("pool indices")
        window = _window_2d(ctx, n, a)
        if op == "avgpool" and window["pad"] and not a.get("count_include_pad", 0):
            raise Unsure("padding excluded from averages")
        kernel = _same(a["kernel_shape"], "kernel_shape")
        return [node(op, ctx.get(n.input[0]), kernel=kernel, **window)]
    return importer


def _global_avgpool(ctx, n, a):
    x = ctx.get(n.input[0])
    if len(x.shape) != 4 or x.shape[2] != x.shape[3]:
        raise Unsure("global pooling over a non-square map")
    return [node("avgpool", x, kernel=x.shape[2], stride=x.shape[2])]


def _gemm(ctx, n, a):
    if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
        raise Unsure("scaled Gemm or transposed A")
    if ctx.opset < 7 and not a.get("broadcast", 0):
        raise Unsure("Gemm without broadcast before opset 7")
    x, w = ctx.get(n.input[0]), ctx.get(n.input[1])
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise Unsure("Gemm operands that are not matrices")
    if a.get("transB", 0):
        w = node("transpose", w, perm=(1, 0))
    args = [x, w]
    if len(n.input) > 2 and n.input[2]:
        bias = ctx.get(n.input[2])
        if bias.shape != (w.shape[1],):
            raise Unsure("Gemm bias that is not one row")
        args.append(bias)
    return [node("matmul", *args)]


def _matmul(ctx, n, a):
    x, w = ctx.get(n.input[0]), ctx.get(n.input[1])
    if len(x.shape) < 2 or len(w.shape) < 2:
        raise Unsure("MatMul of a vector")
    return [node("matmul", x, w)]


def _binary(op: str):
    def importer(ctx, n, a):
        if ctx.opset < 7 or a:
            raise Unsure("legacy broadcasting attributes")
        return [node(op, ctx.get(n.input[0]), ctx.get(n.input[1]))]
    return importer


def _sum(ctx, n, a):
    """Sum of one or more tensors as a chain of adds (opset 8 broadcasts as add does; before,
    the shapes must agree)."""
    if a and set(a) != {"consumed_inputs"}:
        raise Unsure(f"attributes {sorted(a)}")
    values = [ctx.get(i) for i in n.input]
    if ctx.opset < 8 and len({v.shape for v in values}) != 1:
        raise Unsure("a pre-8 Sum of different shapes")
    total = values[0]
    for v in values[1:]:
        total = node("add", total, v)
    return [total]


def _unary(op: str):
    def importer(ctx, n, a):
        if set(a) - {"consumed_inputs"}:
            raise Unsure(f"attributes {sorted(a)}")
        return [node(op, ctx.get(n.input[0]))]
    return importer


def _gelu(ctx, n, a):
    if _text(a.get("approximate", "none")) != "none":
        raise Unsure("tanh-approximated Gelu")
    return [node("gelu", ctx.get(n.input[0]))]


def _softmax(ctx, n, a):
    x = ctx.get(n.input[0])
    rank = len(x.shape)
    axis = int(a.get("axis", -1 if ctx.opset >= 13 else 1))
    if ctx.opset < 13 and axis % rank != rank - 1:
        raise Unsure("a pre-13 Softmax (over the flattened trailing axes) not over the last axis")
    return [node("softmax", x, axis=axis)]


def _layernorm(ctx, n, a):
    x = ctx.get(n.input[0])
    if int(a.get("axis", -1)) % len(x.shape) != len(x.shape) - 1 or any(n.output[1:]):
        raise Unsure("LayerNormalization over more than the last axis, or its statistics")
    if len(n.input) < 3 or not n.input[2] or int(a.get("stash_type", 1)) != 1:
        raise Unsure("LayerNormalization without bias, or not computed in float32")
    return [node("layernorm", x, ctx.get(n.input[1]), ctx.get(n.input[2]),
                 eps=float(a.get("epsilon", 1e-5)))]


def _batchnorm(ctx, n, a):
    training = a.get("training_mode", 0) or (ctx.opset < 7 and not a.get("is_test", 0))
    if training or any(n.output[1:]) or not a.get("spatial", 1):
        raise Unsure("training-mode or per-activation BatchNormalization")
    return [node("batchnorm", *(ctx.get(i) for i in n.input[:5]), eps=float(a.get("epsilon", 1e-5)))]


def _dropout(ctx, n, a):
    """Dropout at inference is the identity (no mask output, not in training mode)."""
    training = ctx.opset < 7 and not a.get("is_test", 0)
    if len(n.input) > 2 and n.input[2]:
        training = training or bool(np.any(ctx.const(n.input[2])))
    if training or any(n.output[1:]):
        raise Unsure("training-mode Dropout or its mask")
    return [ctx.get(n.input[0])]


def _concat(ctx, n, a):
    if "axis" not in a and ctx.opset >= 4:
        raise Unsure("Concat without an axis")
    return [node("concat", *(ctx.get(i) for i in n.input), axis=int(a.get("axis", 1)))]


def _split(ctx, n, a):
    x = ctx.get(n.input[0])
    axis = int(a.get("axis", 0)) % len(x.shape)
    outs = len(n.output)
    if "split" in a:
        sizes = [int(s) for s in a["split"]]
    elif len(n.input) > 1 and n.input[1]:
        sizes = [int(s) for s in ctx.const(n.input[1])]
    elif "num_outputs" in a:
        chunk = -(-x.shape[axis] // int(a["num_outputs"]))
        sizes = [min(chunk, x.shape[axis] - chunk * i) for i in range(outs)]
    elif x.shape[axis] % outs == 0:
        sizes = [x.shape[axis] // outs] * outs
    else:
        raise Unsure("a Split that does not divide evenly")
    if len(sizes) != outs or sum(sizes) != x.shape[axis]:
        raise Unsure("Split sizes that do not cover the axis")
    starts = np.cumsum([0, *sizes])
    return [node("slice", x, axis=axis, start=int(s), end=int(e)) for s, e in zip(starts, starts[1:])]


def _slice_operands(ctx, n, a) -> tuple[list, list, list, list]:
    if ctx.opset < 10:
        starts, ends = a["starts"], a["ends"]
        return list(starts), list(ends), list(a.get("axes", range(len(starts)))), [1] * len(starts)
    starts, ends = list(ctx.const(n.input[1])), list(ctx.const(n.input[2]))
    axes = list(ctx.const(n.input[3])) if len(n.input) > 3 and n.input[3] else list(range(len(starts)))
    steps = list(ctx.const(n.input[4])) if len(n.input) > 4 and n.input[4] else [1] * len(starts)
    return starts, ends, axes, steps


def _slice(ctx, n, a):
    x = ctx.get(n.input[0])
    starts, ends, axes, steps = _slice_operands(ctx, n, a)
    if any(int(s) != 1 for s in steps) or len({int(ax) % len(x.shape) for ax in axes}) != len(axes):
        raise Unsure("strided Slice or a repeated axis")
    out = x
    for start, end, axis in zip(starts, ends, axes):
        axis = int(axis) % len(x.shape)
        size = x.shape[axis]
        lo, hi = (int(np.clip(int(v) + size if int(v) < 0 else int(v), 0, size)) for v in (start, end))
        if (lo, hi) != (0, size):
            out = node("slice", out, axis=axis, start=lo, end=hi)
    return [out]


def _reshape(ctx, n, a):
    x = ctx.get(n.input[0])
    shape = a["shape"] if ctx.opset < 5 else ctx.const(n.input[1])
    target = [int(d) for d in shape]
    if a.get("allowzero", 0) and 0 in target:
        raise Unsure("Reshape to a literal zero size")
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(x.shape)) // max(known, 1)
    return [node("reshape", x, shape=tuple(target))]


def _flatten(ctx, n, a):
    x = ctx.get(n.input[0])
    axis = int(a.get("axis", 1))
    axis = axis + len(x.shape) if axis < 0 else axis
    return [node("reshape", x, shape=(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))]


def _transpose(ctx, n, a):
    x = ctx.get(n.input[0])
    return [node("transpose", x, perm=tuple(a.get("perm", range(len(x.shape))[::-1])))]


def _input(n, k: int) -> str:
    """The name of the node's k-th input, '' where it is omitted."""
    return n.input[k] if len(n.input) > k else ""


def _scalar(ctx, name: str) -> float | None:
    """A constant scalar operand, None where it is omitted."""
    if not name:
        return None
    value = np.asarray(ctx.const(name))
    if value.size != 1:
        raise Unsure(f"operand '{name}' is not a scalar")
    return float(value.reshape(()))


def _clip(ctx, n, a):
    """From opset 6 to 10 the bounds are attributes whose absence means -FLT_MAX/FLT_MAX (a
    clamp of infinities), from 11 optional inputs whose absence means no bound; opset 1's
    Clip, which no reference evaluates, passes through."""
    x = ctx.get(n.input[0])
    if ctx.opset < 6:
        raise Unsure("an opset-1 Clip")
    if ctx.opset < 11:
        lo, hi = a.get("min", -np.finfo(np.float32).max), a.get("max", np.finfo(np.float32).max)
    else:
        lo, hi = _scalar(ctx, _input(n, 1)), _scalar(ctx, _input(n, 2))
    unbounded_above = hi is None or hi == np.inf
    if (lo is None or lo == -np.inf) and unbounded_above:
        return [x]
    if lo == 0.0 and unbounded_above:
        return [node("relu", x)]
    raise Unsure("a Clip that is neither a relu nor unbounded")


def _pads(ctx, n, a, rank: int) -> list[tuple[int, int]]:
    """(before, after) per axis from opset 1's ``paddings``, opset 2's ``pads`` or opset 11's
    inputs (with opset 18's optional ``axes``)."""
    if ctx.opset < 11:
        flat, axes = a["paddings" if ctx.opset < 2 else "pads"], list(range(rank))
    else:
        flat = ctx.const(n.input[1])
        axes = list(ctx.const(_input(n, 3))) if _input(n, 3) else list(range(rank))
    flat = [int(p) for p in flat]
    if len(flat) != 2 * len(axes):
        raise Unsure("pads that do not match the axes")
    per_axis = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        per_axis[int(axis) % rank] = (flat[k], flat[k + len(axes)])
    return per_axis


def _pad(ctx, n, a):
    x = ctx.get(n.input[0])
    if not x.shape:
        raise Unsure("a Pad of a scalar")
    pads = _pads(ctx, n, a, len(x.shape))
    if all(p == (0, 0) for p in pads):
        return [x]
    if _text(a.get("mode", "constant")) != "constant" or any(p > 0 for pair in pads for p in pair):
        raise Unsure("a Pad that adds values")
    out = x
    for axis, (before, after) in enumerate(pads):
        if (before, after) != (0, 0):
            out = node("slice", out, axis=axis, start=-before, end=x.shape[axis] + after)
    return [out]


# the Reduce ops that are the identity over an axis of size 1
_IDENTITY_REDUCTIONS = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd")
_GLOBAL_POOLS = {"ReduceMean": "avgpool", "ReduceMax": "maxpool"}


def _reduce(op_type: str):
    # the opset from which the axes are an input (with noop_with_empty_axes), not an attribute
    axes_input_from = 13 if op_type == "ReduceSum" else 18

    def importer(ctx, n, a):
        x = ctx.get(n.input[0])
        rank = len(x.shape)
        if rank == 0:
            raise Unsure(f"a {op_type} of a scalar")
        if ctx.opset < axes_input_from:
            axes, noop = list(a.get("axes", [])), False
        else:
            name = _input(n, 1)
            axes, noop = (list(ctx.const(name)) if name else []), bool(a.get("noop_with_empty_axes", 0))
        if not axes and noop and op_type in _IDENTITY_REDUCTIONS:
            return [x]
        axes = sorted({int(ax) % rank for ax in axes} if axes else set(range(rank)))
        keep = bool(a.get("keepdims", 1))
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        if op_type in _IDENTITY_REDUCTIONS and all(x.shape[i] == 1 for i in axes):
            out = x
        elif op_type in _GLOBAL_POOLS and rank == 4 and axes == [2, 3] and x.shape[2] == x.shape[3]:
            out = node(_GLOBAL_POOLS[op_type], x, kernel=x.shape[2], stride=x.shape[2])
        else:
            raise Unsure(f"a {op_type} the IR has no op for")
        if not keep:
            out = node("reshape", out, shape=tuple(d for i, d in enumerate(kept) if i not in axes))
        return [out]
    return importer


IMPORTERS: dict[str, Callable] = {
    "Conv": _conv,
    "MatMul": _matmul,
    "Gemm": _gemm,
    **{op: _binary(op.lower()) for op in ("Add", "Sub", "Mul", "Div")},
    "Sum": _sum,
    **{op: _unary(op.lower()) for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Sqrt")},
    "Gelu": _gelu,
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "BatchNormalization": _batchnorm,
    "Dropout": _dropout,
    "MaxPool": _pool("maxpool"),
    "AveragePool": _pool("avgpool"),
    "GlobalAveragePool": _global_avgpool,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Identity": lambda ctx, n, a: [ctx.get(n.input[0])],
    "Clip": _clip,
    "Pad": _pad,
    **{op: _reduce(op) for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd",
                                  "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                  "ReduceSumSquare")},
}
