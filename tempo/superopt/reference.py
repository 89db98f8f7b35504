"""The NumPy reference evaluator: the meaning of every op, in one table.

:data:`KERNELS` maps an op name to ``fn(attrs, *arrays) -> array``;
:func:`evaluate` walks a graph in topological order. Rule verification and
the ONNX round trip are checked against this evaluator.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from math import erf, sqrt

import numpy as np

from tempo.errors import TempoError
from tempo.superopt.graph import Graph, Node

_erf = np.vectorize(erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


ACT = {"none": lambda x: x, "relu": lambda x: np.maximum(x, 0), "sigmoid": _sigmoid,
       "tanh": np.tanh}


def _windows(x: np.ndarray, k: tuple[int, int], stride: int, pad: int, fill: float) -> np.ndarray:
    """(N, C, H', W', kh, kw) sliding windows of an NCHW array."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(x, k, axis=(2, 3))
    return win[:, :, ::stride, ::stride]


def _conv2d(a, x, w, b=None):
    g = a["groups"]
    win = _windows(x, w.shape[2:], a["stride"], a["pad"], 0.0)
    n, c, h, v = win.shape[:4]
    win = win.reshape(n, g, c // g, h, v, *w.shape[2:])
    wg = w.reshape(g, w.shape[0] // g, *w.shape[1:])
    out = np.einsum("ngchwrs,gkcrs->ngkhw", win, wg, optimize=True).reshape(n, -1, h, v)
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return ACT[a["act"]](out)


def _matmul(a, x, w, b=None):
    out = x @ w
    return ACT[a["act"]](out + b if b is not None else out)


def _pool(reduce, fill):
    def kernel(a, x):
        k = a["kernel"]
        return reduce(_windows(x, (k, k), a["stride"], a["pad"], fill), axis=(-2, -1))
    return kernel


def _bn_scale(a, s, v):
    return s / np.sqrt(v + a["eps"])


def _bn_shift(a, s, b, m, v):
    return b - m * _bn_scale(a, s, v)


def _batchnorm(a, x, s, b, m, v):
    return x * _bn_scale(a, s, v).reshape(1, -1, 1, 1) + _bn_shift(a, s, b, m, v).reshape(1, -1, 1, 1)


def _layernorm(a, x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + a["eps"]) * g + b


def _softmax(a, x):
    e = np.exp(x - x.max(a["axis"], keepdims=True))
    return e / e.sum(a["axis"], keepdims=True)


def _enlarge(a, w):
    ph, pw = (a["size"] - w.shape[2]) // 2, (a["size"] - w.shape[3]) // 2
    return np.pad(w, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def _slice(a, x):
    index = [slice(None)] * x.ndim
    index[a["axis"]] = slice(a["start"], a["end"])
    return x[tuple(index)]


# Binary arithmetic is spelled the same on NumPy arrays, JAX arrays and torch tensors.
ARITHMETIC = {
    "add": lambda a, x, y: x + y,
    "sub": lambda a, x, y: x - y,
    "mul": lambda a, x, y: x * y,
    "div": lambda a, x, y: x / y,
}

KERNELS = {
    "relu": lambda a, x: np.maximum(x, 0),
    "sigmoid": lambda a, x: _sigmoid(x),
    "tanh": lambda a, x: np.tanh(x),
    "gelu": lambda a, x: 0.5 * x * (1.0 + _erf(x / sqrt(2.0))),
    "exp": lambda a, x: np.exp(x),
    "sqrt": lambda a, x: np.sqrt(x),
    **ARITHMETIC,
    "conv2d": _conv2d,
    "matmul": _matmul,
    "maxpool": _pool(np.max, -np.inf),
    "avgpool": _pool(np.mean, 0.0),
    "batchnorm": _batchnorm,
    "bn_scale": _bn_scale,
    "bn_shift": _bn_shift,
    "layernorm": _layernorm,
    "softmax": _softmax,
    "enlarge": _enlarge,
    "concat": lambda a, *xs: np.concatenate(xs, axis=a["axis"]),
    "slice": _slice,
    "reshape": lambda a, x: x.reshape(a["shape"]),
    "transpose": lambda a, x: x.transpose(a["perm"]),
}


def leaf_value(n: Node, feeds: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]):
    """The array a leaf node stands for."""
    if n.op == "scalar":
        return np.asarray(n.attr("value"), dtype=np.float64)
    name = n.attr("name")
    table = feeds if n.op == "input" else weights
    if name not in table:
        raise TempoError(f"no value given for {n.op} '{name}'")
    return np.asarray(table[name], dtype=np.float64)


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs for ``feeds`` (input name -> array), computed in float64."""
    env: dict[int, np.ndarray] = {}
    for n in graph.topo():
        if n.op in ("input", "weight", "scalar"):
            env[id(n)] = leaf_value(n, feeds, graph.weights)
        else:
            env[id(n)] = KERNELS[n.op](dict(n.attrs), *(env[id(s)] for s in n.src))
    return [env[id(o)] for o in graph.outputs]


# input name -> the value it takes in its model (see given_feeds)
_GIVEN: dict[str, np.ndarray] = {}


@contextmanager
def given_feeds(feeds: Mapping[str, np.ndarray]):
    """Within the block, :func:`random_feeds` gives an input named in ``feeds`` that value
    (where the shape agrees): a region of an ONNX model is timed and checked on the values its
    inputs take when the model runs."""
    saved = dict(_GIVEN)
    _GIVEN.update(feeds)
    try:
        yield
    finally:
        _GIVEN.clear()
        _GIVEN.update(saved)


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 arrays for every input of ``graph`` (the values
    :func:`given_feeds` gives, where it gives them)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for n in graph.inputs:
        value = _GIVEN.get(n.attr("name"))
        given = value is not None and value.shape == n.shape
        feeds[n.attr("name")] = (np.asarray(value, np.float32) if given else
                                 rng.standard_normal(n.shape).astype(np.float32))
    return feeds
