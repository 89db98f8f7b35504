"""How the next token is picked from the logits: greedy, or sampled with temperature, top-k and top-p.

Both are tensor ops of the program (no host code), so a decoding loop that picks its tokens
either way can run as one device program. Sampling is the Gumbel-max trick: the token is the
argmax of ``logits / temperature`` plus Gumbel noise ``-log(-log(u))`` drawn from the context's
counter-based uniform numbers (``tpo.random.uniform``), which is a draw from
``softmax(logits / temperature)``. Top-k and top-p restrict the argmax to the tokens they keep,
read off the logits sorted in descending order (``argsort``, stable: equal logits in index order).
"""
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


def gather_rows(x: RT, index: RT) -> RT:
    """``x[b, index[b, j]]`` for ``x`` (batch, n) and int64 ``index`` (batch, m): one gather
    (``take``) of the flattened rows; (batch, m)."""
    batch, n = x.shape
    m = index.shape[-1]
    offsets = F.from_numpy(np.arange(batch, dtype=np.int64)[:, None] * n)
    return F.reshape(F.take(F.reshape(x, batch * n), F.reshape(index + offsets, batch * m)), batch, m)


def gumbel(shape: tuple, dims: tuple) -> RT:
    """Standard Gumbel noise ``-log(-log(u))`` of ``shape`` at every point of ``dims``, from the
    context's counter-based uniform numbers (float32)."""
    return -F.log(-F.log(tpo.random.uniform(shape, dims=dims)))


@dataclass(frozen=True)
class Sampling:
    """``greedy``: the most likely token; otherwise a draw from ``softmax(logits / temperature)``
    restricted to the ``top_k`` most likely tokens and the smallest set whose probability
    reaches ``top_p`` (the most likely tokens first, equal logits in index order). Draws are
    Gumbel-max over the context's counter-based random numbers: a function of the seed and the
    position, the same on every backend, so the same seed gives the same tokens."""

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
        ``position`` (None: logits without dims): int64 (batch,), as tensor ops."""
        if self.greedy:
            return argmax(logits)
        noise = gumbel(tuple(logits.shape), () if position is None else (position,))
        z = logits / self.temperature
        if self.top_k is None and self.top_p is None:
            return argmax(z + noise)
        order = F.argsort(-z, axis=-1)                                  # largest first, ties in index order
        ranked = gather_rows(z, order)
        keep = self.kept(ranked)
        pick = argmax(F.where(keep, ranked + noise, F.full((), -np.inf, "float32")))
        return F.reshape(gather_rows(order, F.unsqueeze(pick, -1)), logits.shape[0])

    def kept(self, ranked: RT) -> RT:
        """Which of the sorted logits ``ranked`` (batch, vocab; largest first) top-k and top-p
        keep: bool, (batch, vocab) or (vocab,)."""
        vocab = ranked.shape[-1]
        keep = F.from_numpy(np.arange(vocab) < (vocab if self.top_k is None else self.top_k))
        if self.top_p is None:
            return keep
        masked = F.where(keep, ranked, F.full((), -np.inf, "float32"))
        e = F.exp(masked - F.max(masked, axis=-1, keepdims=True))
        p = e / F.sum(e, axis=-1, keepdims=True)
        return keep & (F.cumsum(p, axis=-1) - p < self.top_p)

