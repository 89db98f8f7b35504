"""Probability distributions over recurrent tensors: Categorical and Normal.

Samples come from the counter-based generator (``tpo.random``), drawn
independently at every point of the parameters' domain.
"""
from __future__ import annotations

import math

import tempo.api.functional as F
from tempo.api import random
from tempo.api.rt import RecurrentTensor as RT
from tempo.nn.functional import log_softmax, one_hot


class Categorical:
    """A categorical distribution over the last axis of ``logits``."""

    def __init__(self, logits: RT) -> None:
        self.logits = logits
        self.num_classes = int(logits.shape[-1])
        self.log_probs = log_softmax(logits)
        self.probs = F.exp(self.log_probs)

    def sample(self) -> RT:
        """int64 class indices, by inverting the CDF at a uniform draw (no gradient)."""
        u = random.uniform(self.logits.shape[:-1], dims=self.logits.domain, dtype=self.logits.dtype)
        below = F.cumsum(self.probs, axis=len(self.logits.shape) - 1) < F.unsqueeze(u, len(u.shape))
        count = F.sum(below.cast("int64"), axis=-1)
        return F.minimum(count, self.num_classes - 1)

    def log_prob(self, value: RT) -> RT:
        return F.sum(self.log_probs * one_hot(value, self.num_classes, self.logits.dtype), axis=-1)

    def entropy(self) -> RT:
        return -F.sum(self.probs * self.log_probs, axis=-1)


class Normal:
    """A normal distribution with elementwise ``mean`` and ``std``."""

    def __init__(self, mean: RT, std) -> None:
        self.mean = mean
        self.std = std if isinstance(std, RT) else F.full((), std, mean.dtype)

    def sample(self) -> RT:
        """``mean + std * z`` with standard normal ``z`` (differentiable in mean and std)."""
        z = random.normal(self.mean.shape, dims=self.mean.domain, dtype=self.mean.dtype)
        return self.mean + self.std * z

    def log_prob(self, value: RT) -> RT:
        z = (value - self.mean) / self.std
        return -0.5 * z * z - F.log(self.std) - 0.5 * math.log(2 * math.pi)

    def entropy(self) -> RT:
        return 0.5 + 0.5 * math.log(2 * math.pi) + F.log(self.std)
