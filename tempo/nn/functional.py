"""Activations and other neural-network functions on recurrent tensors."""
from __future__ import annotations

import math

import numpy as np

import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT


def softmax(x: RT, axis: int = -1) -> RT:
    z = x - F.max(x, axis=axis, keepdims=True)
    e = F.exp(z)
    return e / F.sum(e, axis=axis, keepdims=True)


def log_softmax(x: RT, axis: int = -1) -> RT:
    z = x - F.max(x, axis=axis, keepdims=True)
    return z - F.log(F.sum(F.exp(z), axis=axis, keepdims=True))


def one_hot(index: RT, num_classes: int, dtype: str = "float32") -> RT:
    """``index[..., None] == arange(num_classes)`` as ``dtype``."""
    classes = F.from_numpy(np.arange(num_classes, dtype=index.dtype))
    return (F.unsqueeze(index, len(index.shape)) == classes).cast(dtype)


def gelu(x: RT) -> RT:
    """GELU, tanh approximation."""
    return 0.5 * x * (1.0 + F.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def silu(x: RT) -> RT:
    return x * F.sigmoid(x)


relu, tanh, sigmoid = F.relu, F.tanh, F.sigmoid

ACTIVATIONS = {"relu": relu, "tanh": tanh, "sigmoid": sigmoid, "gelu": gelu, "silu": silu}
