"""Layers: Linear, MLP, Embedding, RMSNorm, LayerNorm.

Each takes ``dims=`` for the domain its parameters vary over (usually the
iteration dim ``(i,)``) and initialises deterministically from the context
seed and the module's creation order.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError, user_site
from tempo.nn.functional import ACTIVATIONS, one_hot
from tempo.nn.module import Module
from tempo.symbolic.expr import Expr


INITS = ("uniform", "orthogonal")


class Linear(Module):
    """``x @ weight + bias`` with ``weight`` of shape (in, out).

    ``init="uniform"``: weight and bias U(-1/sqrt(in), 1/sqrt(in)), times
    ``init_scale``; ``init="orthogonal"``: an orthogonal weight times
    ``init_scale`` (the gain) and a zero bias, as CleanRL's ``layer_init``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dims: Sequence[Expr] = (),
                 init_scale: float = 1.0, init: str = "uniform") -> None:
        super().__init__(dims)
        for what, size in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
                raise TempoError(f"Linear: {what} must be a positive int, got {size!r}", user_site())
        if init not in INITS:
            raise TempoError(f"unknown init {init!r}; choose from {', '.join(INITS)}", user_site())
        if init == "orthogonal":
            weight, bias_init = init_scale * orthogonal(self.rng, in_features, out_features), np.zeros(out_features)
        else:
            bound = init_scale / np.sqrt(in_features)
            weight = self.rng.uniform(-bound, bound, (in_features, out_features))
            bias_init = self.rng.uniform(-bound, bound, (out_features,))
        self.weight = self.param("weight", weight)
        self.bias = self.param("bias", bias_init) if bias else None

    def forward(self, x: RT) -> RT:
        y = F.matmul(x, self.weight)
        return y + self.bias if self.bias is not None else y


def orthogonal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) matrix with orthonormal rows or columns (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.normal(size=(max(rows, cols), min(rows, cols))))
    q = q * np.sign(np.diag(r))
    return q if rows >= cols else q.T


class MLP(Module):
    """Linear layers with an activation between them (none after the last).

    With ``init="orthogonal"`` the hidden layers have gain sqrt(2) and the
    last ``last_init_scale`` (CleanRL's PPO networks).
    """

    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int, activation: str = "tanh",
                 dims: Sequence[Expr] = (), last_init_scale: float = 1.0, init: str = "uniform") -> None:
        super().__init__(dims)
        if activation not in ACTIVATIONS:
            raise TempoError(f"unknown activation {activation!r}; choose from {', '.join(ACTIVATIONS)}",
                             user_site())
        sizes = [in_features, *hidden, out_features]
        hidden_scale = np.sqrt(2.0) if init == "orthogonal" else 1.0
        self.layers = [Linear(a, b, dims=dims, init=init,
                              init_scale=last_init_scale if k == len(sizes) - 2 else hidden_scale)
                       for k, (a, b) in enumerate(zip(sizes, sizes[1:]))]
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: RT) -> RT:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


class Embedding(Module):
    """A table of ``num`` vectors of size ``dim``; looks rows up by integer index (as a one-hot product)."""

    def __init__(self, num: int, dim: int, dims: Sequence[Expr] = ()) -> None:
        super().__init__(dims)
        self.num = num
        self.weight = self.param("weight", self.rng.normal(0.0, 1.0, (num, dim)))

    def forward(self, index: RT) -> RT:
        return F.matmul(one_hot(index, self.num, self.weight.dtype), self.weight)


class RMSNorm(Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last axis."""

    def __init__(self, dim: int, eps: float = 1e-6, dims: Sequence[Expr] = ()) -> None:
        super().__init__(dims)
        self.eps = eps
        self.weight = self.param("weight", np.ones(dim))

    def forward(self, x: RT) -> RT:
        return x / F.sqrt(F.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.weight


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""

    def __init__(self, dim: int, eps: float = 1e-5, dims: Sequence[Expr] = ()) -> None:
        super().__init__(dims)
        self.eps = eps
        self.weight = self.param("weight", np.ones(dim))
        self.bias = self.param("bias", np.zeros(dim))

    def forward(self, x: RT) -> RT:
        centred = x - F.mean(x, axis=-1, keepdims=True)
        var = F.mean(centred * centred, axis=-1, keepdims=True)
        return centred / F.sqrt(var + self.eps) * self.weight + self.bias
