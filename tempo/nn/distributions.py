"""Probability distributions over recurrent tensors: Categorical and Normal.

Samples come from the counter-based generator (``tpo.random``), drawn
independently at every point of the parameters' domain. ``sample()`` is a
constant for autodiff in both (score-function estimators such as REINFORCE
and PPO differentiate ``log_prob(sample)``); ``Normal.rsample()`` is the
reparameterised sample, differentiable in ``mean`` and ``std``.
"""
from __future__ import annotations

import math

import numpy as np

import tempo.api.functional as F
from tempo.api import random
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError, user_site
from tempo.ir.shapes import same_size
from tempo.nn.functional import log_softmax, one_hot
from tempo.nn.module import Module


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
        """``mean + std * z`` with standard normal ``z``, as a constant for autodiff (no gradient).

        ``log_prob(dist.sample())`` then carries the score-function gradient
        to ``mean`` and ``std``; use :meth:`rsample` to differentiate the
        sample itself.
        """
        return F.stop_gradient(self.rsample())

    def rsample(self) -> RT:
        """The reparameterised sample ``mean + std * z``: differentiable in ``mean`` and ``std``."""
        z = random.normal(self.mean.shape, dims=self.mean.domain, dtype=self.mean.dtype)
        return self.mean + self.std * z

    def log_prob(self, value: RT) -> RT:
        z = (value - self.mean) / self.std
        return -0.5 * z * z - F.log(self.std) - 0.5 * math.log(2 * math.pi)

    def entropy(self) -> RT:
        return 0.5 + 0.5 * math.log(2 * math.pi) + F.log(self.std)


class DiagGaussianHead(Module):
    """A diagonal Gaussian policy head with a state-independent learned log std (CleanRL's ``actor_logstd``).

    ``head = DiagGaussianHead(action_size, dims=(i,))`` owns one parameter,
    ``log_std`` of shape ``(action_size,)``, starting at ``init_log_std``
    and trained like any other parameter (pass ``head.parameters()`` to the
    optimizer). ``head(mean)`` is ``Normal(mean, exp(log_std))`` with the
    same std at every state; ``mean`` is the actor network's output, of
    shape ``(..., action_size)``. Sum ``log_prob`` and ``entropy`` over the
    last axis for the probability of a whole action vector.
    """

    def __init__(self, action_size: int, dims=(), init_log_std: float = 0.0) -> None:
        super().__init__(dims)
        if not isinstance(action_size, int) or isinstance(action_size, bool) or action_size < 1:
            raise TempoError(f"DiagGaussianHead: action_size must be a positive int, got {action_size!r}",
                             user_site())
        self.action_size = action_size
        self.log_std = self.param("log_std", np.full((action_size,), init_log_std))

    def forward(self, mean: RT) -> Normal:
        if not mean.shape or not same_size(mean.shape[-1], self.action_size):
            raise TempoError(f"DiagGaussianHead({self.action_size}): the mean must have a last axis of "
                             f"{self.action_size}, got shape {tuple(mean.shape)}", user_site())
        return Normal(mean, F.exp(self.log_std))
