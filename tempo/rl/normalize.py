"""Observation and reward normalisation as CleanRL's continuous PPO uses them, written as recurrences.

CleanRL wraps each environment in gymnasium's ``NormalizeObservation`` (then
clips to ``[-10, 10]``) and ``NormalizeReward(gamma)`` (then clips to
``[-10, 10]``). Both keep running statistics per environment, updated at
every step. Here the statistics are recurrent tensors that run through the
program's time dims in order: over ``(b, i, t)`` the state of environment
``b`` after step ``(i, t)`` is carried to ``(i, t + 1)``, and from the last
step of iteration ``i`` to the first of ``i + 1``. They are ordinary program
state, so they checkpoint (``state_dict()``) and resume (``resume(ckpt)``)
as an optimizer does.

The running mean and variance follow gymnasium's ``RunningMeanStd``: start at
mean 0, variance 1 and a count of ``1e-4``, and merge one sample per step
(Chan et al.'s parallel update). The observation is normalised with the
statistics that already include it; the reward is divided by the standard
deviation of the discounted return ``acc = acc * gamma * (1 - terminated) +
reward``, not centred.

Under same-step autoreset (gymnasium's vector envs, :mod:`tempo.rl.rollout`)
the wrapper sits inside each environment, so it also sees the observation an
episode ends on: that final observation is merged into the statistics and
normalised with them, then the next episode's first observation is merged.
:meth:`NormalizeObservation.final` gives that normalised final observation
(the one a truncated episode bootstraps from) and carries those statistics.

Steps where ``valid`` is false (the padding after an episode ended, in the
episodic mask semantics of :mod:`tempo.rl.env`) leave the statistics as they
are.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.api.rt import restart
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr, as_expr, bound_of, logical_and

INITIAL_COUNT = 1e-4  # gymnasium's RunningMeanStd(epsilon=1e-4)


class _Carry:
    """Placeholders over ``batch + time`` that hold a state before each step and carry it to the next."""

    def __init__(self, domain: tuple[Expr, ...], time: tuple[Expr, ...], every: int = 1):
        self.domain, self.time, self.every = domain, time, every
        self.batch = tuple(d for d in domain if d not in time)
        self.before: dict[str, RT] = {}

    def state(self, name: str, init: np.ndarray) -> RT:
        """The state ``name`` before each step, starting from ``init`` at the first step."""
        init = np.asarray(init, dtype=np.float64)
        s = F.placeholder(init.shape, "float64", self.domain)
        if len(self.time) == 2 and self.every > 1:  # the first rollout starts anywhere before the second
            s[logical_and(self.time[0] < self.every, Expr("eq", (self.time[1], as_expr(0))))] = F.from_numpy(init)
        else:
            s[(*self.batch, *(0 for _ in self.time))] = F.from_numpy(init)
        self.before[name] = s
        return s

    def close(self, name: str, after: RT) -> None:
        """``after`` (the state after a step) is the state before the next step."""
        s, inner = self.before[name], self.time[-1]
        s[(*self.batch, *self.time[:-1], inner + 1)] = after
        if len(self.time) == 2:
            outer = self.time[0]
            s[(*self.batch, outer + self.every, 0)] = after[(*self.batch, outer, bound_of(inner) - 1)]

    def last(self, after: RT) -> RT:
        """``after`` at the last step of each outer time point, gathered over the batch dims."""
        items = [slice(0, bound_of(d)) for d in self.batch] + list(self.time[:-1]) + [bound_of(self.time[-1]) - 1]
        return after[tuple(items)]


class _RunningMeanStd:
    """gymnasium's RunningMeanStd as a recurrence: ``mean``, ``var``, ``count`` after each step."""

    def __init__(self, carry: _Carry, prefix: str, x: RT, valid: RT | None, close: bool = True):
        shape = tuple(x.shape)
        self.carry, self.names = carry, [f"{prefix}/{k}" for k in ("mean", "var", "count")]
        before = [carry.state(self.names[0], np.zeros(shape)), carry.state(self.names[1], np.ones(shape)),
                  carry.state(self.names[2], INITIAL_COUNT)]
        after = merge(before, x)
        if valid is not None:
            after = [F.where(valid, new, old) for new, old in zip(after, before)]
        self.mean, self.var, self.count = after
        if close:
            self.close(after)

    def close(self, after: list[RT]) -> None:
        """``after`` (mean, var, count after a step) is what the next step starts from."""
        for name, value in zip(self.names, after):
            self.carry.close(name, value)


def merge(stats: list[RT], x: RT) -> list[RT]:
    """``(mean, var, count)`` with one more sample ``x`` (gymnasium's ``RunningMeanStd.update`` on a batch of one)."""
    mean, var, count = stats
    delta = x - mean
    total = count + 1.0
    return [mean + delta / total, (var * count + delta * delta * count / total) / total, total]


class _Normalizer:
    """What both wrappers share: the carried statistics, their checkpoint form, and resuming."""

    carry: _Carry
    after: dict[str, RT]

    def state_dict(self) -> dict[str, RT]:
        """Each statistic after the last step of every outer time point (``i``), one row per environment."""
        return {name: self.carry.last(value) for name, value in self.after.items()}

    def rollout_state(self) -> dict[str, RT]:
        """Each statistic as the rollout at ``i`` starts (before its first step), one row per environment:
        what a checkpoint at a rollout's start saves (over two time dims ``(i, t)``)."""
        if len(self.carry.time) != 2:
            raise TempoError("rollout_state() is the statistics at each rollout's start, over two time dims "
                             "(i, t); use state_dict()", user_site())
        outer = self.carry.time[0]
        rows = tuple(slice(0, bound_of(d)) for d in self.carry.batch)
        return {name: before[(*rows, outer, 0)] for name, before in self.carry.before.items()}

    def resume(self, ckpt) -> None:
        """Start every statistic from a checkpoint of :meth:`state_dict` or :meth:`rollout_state`
        (rows per environment)."""
        missing = [name for name in self.after if name not in ckpt.tensors]
        if missing:
            raise TempoError(f"the checkpoint has no tensor for {', '.join(missing)}", user_site())
        for name, state in self.carry.before.items():
            restart(state, np.asarray(ckpt.tensors[name], dtype=np.float64), dims=self.carry.batch)


class NormalizeObservation(_Normalizer):
    """``NormalizeObservation(o).normalized``: ``o`` standardised by its running per-environment statistics.

    ``o`` is an observation RT over ``(b, ..., t)``; ``time`` names the dims
    the statistics run through in order (default: all but the first, e.g.
    ``(i, t)``; one or two dims), the others (``b``) each keep their own
    statistics, as each of CleanRL's environments has its own wrapper. The
    result is ``clip((o - mean) / sqrt(var + epsilon), -clip, clip)`` as
    float32, with the statistics after ``o``'s own step (gymnasium's order).
    ``valid`` (bool, over ``o``'s dims) marks the steps that count.
    ``prefix`` names the statistics in :meth:`state_dict`. ``rollout_every``:
    over two time dims ``(i, t)`` with rollouts at every k-th ``i``
    (:mod:`tempo.rl.rollout`), the statistics go from ``i`` to ``i + k``.
    ``autoreset``: the environments autoreset at the same step, and the
    statistics carried to the next step are those :meth:`final` gives
    (call it once, with the step's final observation and ``done``).
    """

    def __init__(self, obs: RT, time: Sequence[Expr] | None = None, clip: float = 10.0, epsilon: float = 1e-8,
                 valid: RT | None = None, prefix: str = "obs_rms", rollout_every: int = 1,
                 autoreset: bool = False) -> None:
        if autoreset and valid is not None:
            raise TempoError("NormalizeObservation: autoresetting environments have no invalid steps; "
                             "give autoreset or valid, not both", user_site())
        self.carry = _time_carry(obs, time, "NormalizeObservation", rollout_every)
        self.clip, self.epsilon, self.autoreset = clip, epsilon, autoreset
        self._final: RT | None = None
        self.rms = _RunningMeanStd(self.carry, prefix, obs.cast("float64"), valid, close=not autoreset)
        rms = self.rms
        self.after = dict(zip(rms.names, (rms.mean, rms.var, rms.count)))
        self.mean, self.var = rms.mean, rms.var
        self.normalized = self._normalize(obs, rms.mean, rms.var)

    def final(self, final_obs: RT, done: RT) -> RT:
        """The step's final observation (the one it reached, before any reset), normalised as gymnasium's
        wrapper inside an autoresetting environment normalises it: merged into the statistics first.

        Where the episode goes on, this is the next step's ``normalized``;
        where ``done`` holds (bool, over the step's dims), the statistics
        with the final observation merged are carried on, and the next
        episode's first observation is merged into them at the next step.
        Needs ``autoreset=True``.
        """
        if not self.autoreset:
            raise TempoError("NormalizeObservation.final needs a normaliser made with autoreset=True "
                             "(which carries the statistics final() gives)", user_site())
        if self._final is not None:
            raise TempoError("NormalizeObservation.final is called once per normaliser", user_site())
        stats = [self.rms.mean, self.rms.var, self.rms.count]
        merged = merge(stats, final_obs.cast("float64"))
        carried = [F.where(done, new, old) for new, old in zip(merged, stats)]
        self.rms.close(carried)
        self.after = dict(zip(self.rms.names, carried))
        self._final = self._normalize(final_obs, merged[0], merged[1])
        return self._final

    def _normalize(self, obs: RT, mean: RT, var: RT) -> RT:
        scaled = (obs.cast("float64") - mean) / F.sqrt(var + self.epsilon)
        return _clip(scaled, self.clip).cast("float32")


class NormalizeReward(_Normalizer):
    """``NormalizeReward(r, terminated, gamma).normalized``: rewards scaled by the running std of the return.

    Per environment, ``acc = acc * gamma * (1 - terminated) + r`` runs
    through the ``time`` dims (as in :class:`NormalizeObservation`), its
    running variance is updated with every step's ``acc``, and the result is
    ``clip(r / sqrt(var + epsilon), -clip, clip)`` as float32: gymnasium's
    ``NormalizeReward`` followed by CleanRL's clip. ``terminated`` (bool) is
    the transition's termination, not truncation. ``rollout_every`` as in
    :class:`NormalizeObservation`.
    """

    def __init__(self, reward: RT, terminated: RT, gamma: float = 0.99, time: Sequence[Expr] | None = None,
                 clip: float = 10.0, epsilon: float = 1e-8, valid: RT | None = None,
                 prefix: str = "return_rms", rollout_every: int = 1) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise TempoError(f"NormalizeReward: gamma must be in [0, 1], got {gamma}", user_site())
        self.carry = _time_carry(reward, time, "NormalizeReward", rollout_every)
        acc = self.carry.state(f"{prefix}/return", 0.0)
        keep = 1.0 - terminated.cast("float64")
        acc_after = acc * gamma * keep + reward.cast("float64")
        if valid is not None:
            acc_after = F.where(valid, acc_after, acc)
        self.carry.close(f"{prefix}/return", acc_after)
        rms = _RunningMeanStd(self.carry, prefix, acc_after, valid)
        self.after = {f"{prefix}/return": acc_after, **dict(zip(rms.names, (rms.mean, rms.var, rms.count)))}
        self.var = rms.var
        self.normalized = _clip(reward.cast("float64") / F.sqrt(rms.var + epsilon), clip).cast("float32")


def _clip(x: RT, bound: float) -> RT:
    return F.minimum(F.maximum(x, -bound), bound)


def _time_carry(x: RT, time: Sequence[Expr] | None, what: str, every: int = 1) -> _Carry:
    site = user_site()
    domain = tuple(x.domain)
    time = tuple(domain[1:] if time is None else time)
    if not 1 <= len(time) <= 2 or any(d not in domain for d in time):
        raise TempoError(f"{what}: time must be one or two of the tensor's dims "
                         f"({', '.join(d.name for d in domain) or 'none'}), got {time!r}", site)
    if domain[len(domain) - len(time):] != x.ctx.order(time):
        raise TempoError(f"{what}: the time dims must be the tensor's last dims, in order", site)
    return _Carry(domain, time, every)
