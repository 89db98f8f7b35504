"""How the next token is picked from the logits: greedy, or sampled with temperature, top-k and top-p."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tempo as tpo
import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError


def argmax(x: RT) -> RT:
    """The first index of the largest value along the last axis (int64), as tensor ops."""
    n = x.shape[-1]
    index = F.from_numpy(np.arange(n, dtype=np.int64))
    hit = x == F.max(x, axis=-1, keepdims=True)
    return F.min(F.where(hit, index, F.full((), n, "int64")), axis=-1)


@dataclass(frozen=True)
class Sampling:
    """``greedy``: the most likely token; otherwise a draw from ``softmax(logits / temperature)``
    restricted to the ``top_k`` most likely tokens and the smallest set whose probability
    reaches ``top_p``. Draws use the context's counter-based random numbers: a function of
    the seed and the position, so the same seed gives the same tokens."""

    greedy: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise TempoError(f"temperature must be > 0, not {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise TempoError(f"top_k must be >= 1, not {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise TempoError(f"top_p must be in (0, 1], not {self.top_p}")

    def next_token(self, logits: RT, position=None) -> RT:
        """The token picked at each point of ``logits`` (batch, vocab) over the dim of step
        ``position`` (None: logits without dims): int64 (batch,)."""
        if self.greedy:
            return argmax(logits)
        batch = logits.shape[0]
        u = tpo.random.uniform((batch,), dims=() if position is None else (position,))
        return F.udf(lambda lg, r: (self.draw(lg, r),), [logits, u], out_shapes=[(batch,)],
                     out_dtypes=["int64"], label="sample")

    def draw(self, logits: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One token per row of ``logits``, chosen by the uniform numbers ``u`` (inverse CDF)."""
        z = logits.astype(np.float64) / self.temperature
        order = np.argsort(-z, axis=-1, kind="stable")
        z = np.take_along_axis(z, order, axis=-1)
        if self.top_k is not None:
            z[:, self.top_k:] = -np.inf
        p = np.exp(z - z[:, :1])
        p /= p.sum(axis=-1, keepdims=True)
        if self.top_p is not None:
            before = np.cumsum(p, axis=-1) - p
            p = np.where(before < self.top_p, p, 0.0)
            p /= p.sum(axis=-1, keepdims=True)
        cdf = np.cumsum(p, axis=-1)
        pick = np.minimum((cdf < u[:, None] * cdf[:, -1:]).sum(axis=-1), p.shape[-1] - 1)
        return order[np.arange(len(order)), pick].astype(np.int64)
