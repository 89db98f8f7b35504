"""Minibatch SGD over a rollout, as CleanRL's PPO does it, with recurrent tensors.

The update dim ``i`` counts optimizer steps. A rollout is taken at every
``epochs * num_minibatches``-th update, and the updates up to the next one
train on it: ``epochs`` passes, each over ``num_minibatches`` minibatches of
a fresh shuffle of the rollout's ``N`` samples. Update ``i`` is minibatch
``i % num_minibatches`` of epoch ``(i // num_minibatches) % epochs``.

The shuffle is the order that sorts ``N`` uniform draws from the
counter-based generator (``tpo.random``) at the epoch's first update (a
stable ``argsort``): a function of the seed and the update index only, so a
resumed run shuffles as the uninterrupted one. Minibatch ``m`` holds the
samples ranked ``m * S`` to ``(m + 1) * S - 1`` (``S = N // num_minibatches``),
gathered with ``take``: ``O(N log N)`` per epoch and ``O(S)`` rows per update
on every backend.
"""
from __future__ import annotations


import tempo.api.functional as F
from tempo.api.random import uniform
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr, bound_of

RT = RecurrentTensor


class Minibatches:
    """The minibatch schedule of updates over ``i`` (see the module docstring).

    ``samples`` is ``N``, the samples per rollout (environments times
    steps); it must be a multiple of ``num_minibatches``.
    """

    def __init__(self, i: Expr, samples: int, epochs: int, num_minibatches: int) -> None:
        site = user_site()
        for name, value in (("samples", samples), ("epochs", epochs), ("num_minibatches", num_minibatches)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TempoError(f"{name} must be a positive int, got {value!r}", site)
        if samples % num_minibatches:
            raise TempoError(f"a rollout of {samples} samples does not split into {num_minibatches} "
                             f"minibatches of equal size", site)
        self.i, self.samples, self.epochs, self.num_minibatches = i, samples, epochs, num_minibatches
        self.size = samples // num_minibatches
        self.rollout_every = epochs * num_minibatches
        self.shuffle = F.argsort(uniform((samples,), dims=(i,), dtype="float64"))  # the sample at each rank

    @property
    def rollout(self) -> Expr:
        """The update whose rollout update ``i`` trains on: ``(i // rollout_every) * rollout_every``."""
        return (self.i // self.rollout_every) * self.rollout_every

    @property
    def epoch_start(self) -> Expr:
        """The first update of ``i``'s epoch, where the shuffle is drawn."""
        return (self.i // self.num_minibatches) * self.num_minibatches

    def order(self) -> RT:
        """int64 ``(S,)`` over ``i``: the rollout's sample indices in update ``i``'s minibatch."""
        first = (self.i % self.num_minibatches) * self.size
        return self.shuffle[self.epoch_start].spatial[first:first + self.size]

    def select(self, table: RT) -> RT:
        """The rows of ``table[rollout]`` (an ``(N, F)`` RT over ``i``) in update ``i``'s minibatch: ``(S, F)``."""
        if len(table.shape) != 2:
            raise TempoError(f"a rollout table is shaped ({self.samples}, features), got {tuple(table.shape)}",
                             user_site())
        return F.take(table[self.rollout], self.order(), axis=0)

    def keep_updating(self, approx_kl: RT, target_kl: float) -> RT:
        """CleanRL's ``--target-kl``: bool over ``i``, false for the updates after an epoch whose last
        minibatch's ``approx_kl`` (a scalar RT over ``i``) exceeded ``target_kl``, until the next rollout.

        Give it to ``Optimizer.step(when=...)``.
        """
        i, m = self.i, self.num_minibatches
        stopped = F.placeholder((), "bool", (i,))
        stopped[0] = False
        epoch_end = F.eval_symbol(i % m) == m - 1
        after = stopped | (epoch_end & (approx_kl > target_kl))
        stopped[i + 1] = F.where(F.eval_symbol((i + 1) % self.rollout_every) == 0, False, after)
        return ~stopped


def flatten(x: RT, num_envs: int, num_steps: int) -> RT:
    """``x[0:num_envs, i, 0:num_steps]`` of an RT over ``(b, i, t)`` as ``(num_envs * num_steps, *shape)``:
    a rollout's samples, environment-major. The sizes are the run's bounds ``B`` and ``T``."""
    b, i, t = x.domain
    window = x[0:bound_of(b), i, 0:bound_of(t)]  # read whole, so the batch dim stays vectorizable
    return F.reshape(window, bound_of(b) * bound_of(t), *x.shape).spatial[0:num_envs * num_steps]
