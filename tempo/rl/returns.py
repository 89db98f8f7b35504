"""Return estimators written with recurrent tensors.

Each takes RTs over dims such as ``(b, i, t)``; the *time dim* is the last
dim of ``reward``'s domain and ``T`` its bound. ``reward[t]`` and ``done[t]``
belong to the transition from ``o[t]`` to ``o[t + 1]`` and ``value[t]``
estimates ``o[t]``, as :mod:`tempo.rl.env` produces them. Under its mask
semantics (once ``done``, rewards are 0 and ``done`` stays true) every
estimator here is 0 at the timesteps after an episode's end.
"""
from __future__ import annotations

from tempo.api.context import current
from tempo.api.functional import minimum, placeholder, where
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr, bound_of

RT = RecurrentTensor


def discounted_returns(reward: RT, gamma: float) -> RT:
    """Monte-Carlo returns ``g[t] = sum_{k=t}^{T-1} gamma**(k-t) * reward[k]``.

    Spelled ``reward[b, i, t:T].discounted_sum(gamma)``: each ``g[t]`` reads
    the rest of its episode.
    """
    t = _time_dim(reward)
    return _window(reward, t, bound_of(t)).discounted_sum(gamma)


def n_step_returns(reward: RT, gamma: float, n: int, value: RT | None = None, done: RT | None = None) -> RT:
    """n-step returns ``sum_{k=t}^{min(t+n, T)-1} gamma**(k-t) * reward[k]`` (``reward[t:min(t+n, T)]``).

    With ``value``, the return bootstraps from ``gamma**n * value[t + n]``
    where ``t + n < T`` and the episode has not ended by then (``done[t + n -
    1]`` false; ``done`` may be None for episodes that never end).
    """
    t = _time_dim(reward)
    if not isinstance(n, int) or n < 1:
        raise TempoError(f"n-step returns need an int n >= 1, got {n!r}", user_site())
    g = _window(reward, t, minimum(t + n, bound_of(t))).discounted_sum(gamma)
    if value is None:
        return g
    boot = gamma ** n * _shift(value, t, n)
    if done is not None:
        boot = boot * _not(_shift(done, t, n - 1))
    tail = _placeholder_over(t, value.dtype, reward, value, done)
    tail[t < bound_of(t) - n] = boot
    tail[t >= bound_of(t) - n] = 0.0
    return g + tail


def gae(reward: RT, value: RT, done: RT | None, gamma: float, lam: float,
        last_value: RT | None = None) -> tuple[RT, RT]:
    """Generalized advantage estimation: ``(advantages, returns)``, ``returns = advantages + value``.

    ``delta[t] = reward[t] + gamma * (1 - done[t]) * value[t + 1] - value[t]``
    and ``adv[t] = delta[t] + gamma * lam * (1 - done[t]) * adv[t + 1]``, a
    backward recurrence over the time dim. ``value[T]`` is ``last_value`` (an
    RT over the episode dims, the value of the observation after the last
    step) or 0. Advantages and returns are 0 at timesteps after an episode's
    end (where ``done[t - 1]`` holds).
    """
    t = _time_dim(reward)
    T = bound_of(t)
    _time_dim(value, t)
    next_value = _placeholder_over(t, value.dtype, reward, value, done, last_value)
    next_value[t < T - 1] = _shift(value, t, 1)
    next_value[t >= T - 1] = 0.0 if last_value is None else last_value
    live = 1.0 if done is None else _not(done)
    delta = reward + gamma * live * next_value - value
    if done is not None:
        after_end = _placeholder_over(t, "bool", done)
        after_end[_at_time(after_end, t, 0)] = False
        after_end[_at_time(after_end, t, t + 1)] = done
        delta = where(after_end, 0.0, delta)
    adv = _placeholder_over(t, delta.dtype, delta)
    adv[t >= T - 1] = delta
    adv[t < T - 1] = delta + gamma * lam * live * _shift(adv, t, 1)
    returns = adv + (value if done is None else where(after_end, 0.0, value))
    return adv, returns


def rollout_gae(reward: RT, value: RT, next_value: RT, terminated: RT, done: RT, gamma: float,
                lam: float) -> tuple[RT, RT]:
    """GAE over rollouts of autoresetting environments (:mod:`tempo.rl.rollout`): ``(advantages, returns)``.

    ``next_value[t]`` is the value of ``final_obs[t]``, the observation step
    ``t`` reached before any reset: the next observation's value inside an
    episode and across the rollout boundary, and the value to bootstrap from
    at a truncation. ``delta[t] = reward[t] + gamma * (1 - terminated[t]) *
    next_value[t] - value[t]`` and ``adv[t] = delta[t] + gamma * lam * (1 -
    done[t]) * adv[t + 1]``, with ``adv[T - 1] = delta[T - 1]`` (the next
    rollout's steps are not seen). ``returns = advantages + value``.
    """
    t = _time_dim(reward)
    T = bound_of(t)
    for x in (value, next_value, terminated, done):
        _time_dim(x, t)
    delta = reward + gamma * _not(terminated) * next_value - value
    adv = _placeholder_over(t, delta.dtype, delta, done)
    adv[t >= T - 1] = delta
    adv[t < T - 1] = delta + gamma * lam * _not(done) * _shift(adv, t, 1)
    return adv, adv + value


def alive(done: RT) -> RT:
    """1.0 at the steps of an episode up to and including its ending transition, 0.0 after it.

    ``alive[t] = 1 - done[t - 1]`` (``done`` holds from the ending transition
    on, see the mask semantics in ``tempo.rl.env``) and ``alive[0] = 1``.
    """
    t = _time_dim(done)
    mask = _placeholder_over(t, "float32", done)
    mask[_at_time(mask, t, 0)] = 1.0
    mask[_at_time(mask, t, t + 1)] = _not(done)
    return mask


# ----- helpers -----
def _time_dim(x: RT, t: Expr | None = None) -> Expr:
    if not isinstance(x, RT) or not x.domain:
        raise TempoError(f"return estimators take RTs over a time dim, got {x!r}", user_site())
    if tuple(x.shape) != ():
        raise TempoError(f"return estimators take scalar RTs (per timestep), got shape {tuple(x.shape)}",
                         user_site())
    if t is not None and t not in x.domain:
        raise TempoError(f"{x!r} does not vary with the time dim {t.name}", user_site())
    return x.domain[-1] if t is None else t


def _at_time(x: RT, t: Expr, index) -> tuple:
    """An index of ``x``'s domain: the identity, with ``index`` for ``t``."""
    return tuple(index if d is t else d for d in x.domain)


def _window(x: RT, t: Expr, stop: Expr) -> RT:
    return x[_at_time(x, t, slice(t, stop))]


def _shift(x: RT, t: Expr, k: int) -> RT:
    _time_dim(x, t)
    return x if k == 0 else x[_at_time(x, t, t + k)]


def _not(done: RT) -> RT:
    return 1.0 - done.cast("float32") if done.dtype == "bool" else 1.0 - done


def _placeholder_over(t: Expr, dtype: str, *rts) -> RT:
    steps = {t} | {d for x in rts if isinstance(x, RT) for d in x.domain}
    return placeholder((), dtype, current().order(steps))
