"""Small graphs shared by the superopt tests."""
from __future__ import annotations

import numpy as np

from tempo.superopt.graph import Graph, GraphBuilder, node


def every_op_graph(seed: int = 0) -> Graph:
    """A small graph that uses every op of the IR (except verbatim ONNX nodes)."""
    b = GraphBuilder(seed)
    x = b.input("x", (1, 8, 12, 12))
    c = node("conv2d", x, b.weight((16, 8, 3, 3)), b.weight((16,)), pad=1, act="relu")
    c2 = node("conv2d", x, b.weight((16, 4, 3, 3)), pad=1, groups=2, stride=2, act="tanh")
    p = node("maxpool", c, kernel=3, stride=2, pad=1)
    root = b.weight((16,))
    var = node("add", node("mul", root, root), node("scalar", value=1.0))
    bn = node("batchnorm", p, b.weight((16,)), b.weight((16,)), b.weight((16,)), var)
    m = node("matmul", node("reshape", bn, shape=(16, 36)), b.weight((36, 5)), b.weight((5,)),
             act="sigmoid")
    s = node("softmax", node("gelu", m), axis=0)
    ln = node("layernorm", s, b.weight((5,)), b.weight((5,)))
    t = node("transpose", ln, perm=(1, 0))
    cat = node("concat", t, node("exp", t), axis=1)
    sl = node("slice", cat, axis=1, start=3, end=20)
    a = node("avgpool", c2, kernel=2, stride=2)
    e = node("conv2d", a, node("enlarge", b.weight((4, 16, 1, 1)), size=3), pad=1)
    q = node("div", node("sub", e, node("sqrt", node("mul", e, e))), node("scalar", value=2.0))
    bs = node("bn_shift", b.weight((4,)), b.weight((4,)), b.weight((4,)), var_pos := b.weight((4,), value=np.full(4, 0.5)))
    out = node("add", q, node("reshape", node("mul", bs, node("bn_scale", bs, var_pos)),
                              shape=(4, 1, 1)))
    return b.build([sl, node("sigmoid", out)])
