"""Model builders for the paper's workloads (inference graphs, batch 1, NCHW).

Each builder takes its sizes as keyword arguments whose defaults are the
published models' shapes; :data:`WORKLOADS` lists them by name with a
``small`` variant of the sizes for quick runs and tests and a ``medium`` one
in between.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.graph import Graph, GraphBuilder, Node, node


# ---------------------------------------------------------------- transformer parts
def _linear(b: GraphBuilder, x: Node, n_out: int) -> Node:
    return node("add", node("matmul", x, b.weight((x.shape[-1], n_out))), b.weight((n_out,)))


def _layernorm(b: GraphBuilder, x: Node) -> Node:
    d = x.shape[-1]
    return node("layernorm", x, b.weight((d,), value=np.ones(d)), b.weight((d,), value=np.zeros(d)))


def _heads(x: Node, heads: int) -> Node:
    """[seq, hidden] -> [heads, seq, hidden / heads]."""
    seq, hidden = x.shape
    return node("transpose", node("reshape", x, shape=(seq, heads, hidden // heads)), perm=(1, 0, 2))


def _attention(b: GraphBuilder, x: Node, memory: Node, heads: int) -> Node:
    """Multi-head attention of queries from ``x`` over keys and values from ``memory``."""
    hidden = x.shape[-1]
    q = _heads(_linear(b, x, hidden), heads)
    k = _heads(_linear(b, memory, hidden), heads)
    v = _heads(_linear(b, memory, hidden), heads)
    scale = node("scalar", value=float(1.0 / np.sqrt(hidden // heads)))
    scores = node("mul", node("matmul", q, node("transpose", k, perm=(0, 2, 1))), scale)
    ctx = node("matmul", node("softmax", scores, axis=-1), v)
    merged = node("reshape", node("transpose", ctx, perm=(1, 0, 2)), shape=(x.shape[0], hidden))
    return _linear(b, merged, hidden)


def _ffn(b: GraphBuilder, x: Node, inner: int) -> Node:
    return _linear(b, node("gelu", _linear(b, x, inner)), x.shape[-1])


def bert(seq: int = 128, hidden: int = 768, heads: int = 12, inner: int = 3072, layers: int = 1,
         seed: int = 0) -> Graph:
    """BERT-base encoder layers (post-norm), input [seq, hidden]."""
    b = GraphBuilder(seed)
    x = b.input("x", (seq, hidden))
    for _ in range(layers):
        x = _layernorm(b, node("add", x, _attention(b, x, x, heads)))
        x = _layernorm(b, node("add", x, _ffn(b, x, inner)))
    return b.build([x])


def vit(tokens: int = 197, hidden: int = 768, heads: int = 12, inner: int = 3072, layers: int = 1,
        seed: int = 0) -> Graph:
    """ViT-B/16 encoder blocks (pre-norm), input [tokens, hidden]."""
    b = GraphBuilder(seed)
    x = b.input("x", (tokens, hidden))
    for _ in range(layers):
        h = _layernorm(b, x)
        x = node("add", x, _attention(b, h, h, heads))
        x = node("add", x, _ffn(b, _layernorm(b, x), inner))
    return b.build([x])


def decoder(seq: int = 64, memory: int = 64, hidden: int = 512, heads: int = 8, inner: int = 2048,
            seed: int = 0) -> Graph:
    """A transformer decoder block: self-attention, cross-attention over ``memory``, FFN."""
    b = GraphBuilder(seed)
    x = b.input("x", (seq, hidden))
    mem = b.input("memory", (memory, hidden))
    x = _layernorm(b, node("add", x, _attention(b, x, x, heads)))
    x = _layernorm(b, node("add", x, _attention(b, x, mem, heads)))
    x = _layernorm(b, node("add", x, _ffn(b, x, inner)))
    return b.build([x])


# ---------------------------------------------------------------- convolutional parts
def _bn(b: GraphBuilder, x: Node) -> Node:
    c = x.shape[1]
    rng = b.rng
    return node("batchnorm", x, b.weight((c,), value=rng.uniform(0.5, 1.5, c)),
                b.weight((c,), value=rng.uniform(-0.1, 0.1, c)),
                b.weight((c,), value=rng.uniform(-0.1, 0.1, c)),
                b.weight((c,), value=rng.uniform(0.5, 1.5, c)))


def _conv_bn(b: GraphBuilder, x: Node, out: int, k: int, stride: int = 1, groups: int = 1,
             relu: bool = True) -> Node:
    w = b.weight((out, x.shape[1] // groups, k, k))
    y = _bn(b, node("conv2d", x, w, stride=stride, pad=k // 2, groups=groups))
    return node("relu", y) if relu else y


def resnext(channels: int = 256, size: int = 56, width: int = 128, groups: int = 32, blocks: int = 2,
            seed: int = 0) -> Graph:
    """ResNeXt-50 (32x4d) bottleneck blocks of stage 1, input [1, channels, size, size]."""
    b = GraphBuilder(seed)
    x = b.input("x", (1, channels, size, size))
    for _ in range(blocks):
        y = _conv_bn(b, x, width, 1)
        y = _conv_bn(b, y, width, 3, groups=groups)
        y = _conv_bn(b, y, channels, 1, relu=False)
        x = node("relu", node("add", x, y))
    return b.build([x])


def _fire(b: GraphBuilder, x: Node, squeeze: int, expand: int) -> Node:
    s = node("relu", node("conv2d", x, b.weight((squeeze, x.shape[1], 1, 1)), b.weight((squeeze,))))
    e1 = node("relu", node("conv2d", s, b.weight((expand, squeeze, 1, 1)), b.weight((expand,))))
    e3 = node("relu", node("conv2d", s, b.weight((expand, squeeze, 3, 3)), b.weight((expand,)),
                           pad=1))
    return node("concat", e1, e3, axis=1)


def squeezenet(size: int = 224, width: float = 1.0, seed: int = 0) -> Graph:
    """SqueezeNet 1.1 (convolutional trunk and classifier), input [1, 3, size, size]."""
    b = GraphBuilder(seed)
    c = lambda n: max(int(n * width), 4)  # noqa: E731
    x = b.input("x", (1, 3, size, size))
    x = node("relu", node("conv2d", x, b.weight((c(64), 3, 3, 3)), b.weight((c(64),)), stride=2))
    x = node("maxpool", x, kernel=3, stride=2)
    x = _fire(b, _fire(b, x, c(16), c(64)), c(16), c(64))
    x = node("maxpool", x, kernel=3, stride=2)
    x = _fire(b, _fire(b, x, c(32), c(128)), c(32), c(128))
    x = node("maxpool", x, kernel=3, stride=2)
    for squeeze, expand in ((48, 192), (48, 192), (64, 256), (64, 256)):
        x = _fire(b, x, c(squeeze), c(expand))
    x = node("relu", node("conv2d", x, b.weight((100, x.shape[1], 1, 1)), b.weight((100,))))
    x = node("avgpool", x, kernel=x.shape[2], stride=x.shape[2])
    return b.build([node("reshape", x, shape=(1, 100))])


def inception(channels: int = 192, size: int = 35, seed: int = 0) -> Graph:
    """InceptionV3's first Inception-A block, input [1, channels, size, size]."""
    b = GraphBuilder(seed)
    x = b.input("x", (1, channels, size, size))
    b1 = _conv_bn(b, x, 64, 1)
    b5 = _conv_bn(b, _conv_bn(b, x, 48, 1), 64, 5)
    b3 = _conv_bn(b, _conv_bn(b, _conv_bn(b, x, 64, 1), 96, 3), 96, 3)
    bp = _conv_bn(b, node("avgpool", x, kernel=3, stride=1, pad=1), 32, 1)
    return b.build([node("concat", b1, b5, b3, bp, axis=1)])


SCALES = ("small", "medium", "full")


@dataclass(frozen=True)
class Workload:
    """A named model builder, its sizes at each scale, and three other input shapes per scale.

    ``sizes`` holds the keyword arguments of the ``small`` and ``medium``
    scales (``full`` is the builder's defaults, the published shapes);
    ``shapes`` holds, per scale, three other input shapes for the
    generalisation run (X-RLflow Fig. 7)."""

    build: Callable[..., Graph]
    sizes: dict[str, dict]
    shapes: dict[str, tuple[dict, ...]]


WORKLOADS: dict[str, Workload] = {
    "bert": Workload(
        bert, {"small": {"seq": 32, "hidden": 128, "heads": 4, "inner": 512},
               "medium": {"seq": 64, "hidden": 256, "heads": 4, "inner": 1024}},
        {"small": ({"seq": 16}, {"seq": 48}, {"seq": 64}),
         "medium": ({"seq": 32}, {"seq": 96}, {"seq": 128}),
         "full": ({"seq": 64}, {"seq": 192}, {"seq": 256})}),
    "vit": Workload(
        vit, {"small": {"tokens": 50, "hidden": 128, "heads": 4, "inner": 512},
              "medium": {"tokens": 65, "hidden": 256, "heads": 4, "inner": 1024}},
        {"small": ({"tokens": 17}, {"tokens": 65}, {"tokens": 101}),
         "medium": ({"tokens": 50}, {"tokens": 101}, {"tokens": 197}),
         "full": ({"tokens": 50}, {"tokens": 145}, {"tokens": 257})}),
    "decoder": Workload(
        decoder, {"small": {"seq": 16, "memory": 16, "hidden": 128, "heads": 4, "inner": 512},
                  "medium": {"seq": 32, "memory": 32, "hidden": 256, "heads": 4, "inner": 1024}},
        {"small": ({"seq": 8}, {"seq": 32}, {"seq": 48}),
         "medium": ({"seq": 16}, {"seq": 48}, {"seq": 64}),
         "full": ({"seq": 32}, {"seq": 96}, {"seq": 128})}),
    "resnext": Workload(
        resnext, {"small": {"channels": 64, "size": 14, "width": 32, "groups": 8, "blocks": 1},
                  "medium": {"channels": 128, "size": 28, "width": 64, "groups": 16, "blocks": 1}},
        {"small": ({"size": 7}, {"size": 21}, {"size": 28}),
         "medium": ({"size": 14}, {"size": 21}, {"size": 42}),
         "full": ({"size": 28}, {"size": 42}, {"size": 84})}),
    "squeezenet": Workload(
        squeezenet, {"small": {"size": 64, "width": 0.25}, "medium": {"size": 112, "width": 0.5}},
        {"small": ({"size": 48}, {"size": 80}, {"size": 96}),
         "medium": ({"size": 96}, {"size": 128}, {"size": 160}),
         "full": ({"size": 160}, {"size": 192}, {"size": 256})}),
    "inception": Workload(
        inception, {"small": {"channels": 32, "size": 9}, "medium": {"channels": 96, "size": 17}},
        {"small": ({"size": 7}, {"size": 13}, {"size": 17}),
         "medium": ({"size": 13}, {"size": 21}, {"size": 25}),
         "full": ({"size": 17}, {"size": 27}, {"size": 43})}),
}


def build(name: str, scale: str = "full", **overrides) -> Graph:
    """The workload ``name`` at ``scale`` (one of :data:`SCALES`), with size overrides."""
    if scale not in SCALES:
        raise TempoError(f"unknown scale '{scale}' (one of {', '.join(SCALES)})")
    w = WORKLOADS[name]
    return w.build(**{**w.sizes.get(scale, {}), **overrides})
