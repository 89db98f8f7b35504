"""Rollouts of persistent environments: state carried from one rollout to the next.

A rollout program runs over dims ``(b, i, t)``: ``B`` environments, each
stepped ``T`` times per rollout. Unlike episodes (:mod:`tempo.rl.env`), an
environment keeps running across rollouts and resets itself when an episode
ends, as CleanRL's and Stable-Baselines3's vector environments do. Rollouts
happen at every ``every``-th point of ``i`` (``i = 0, every, 2 * every, ...``;
the points between are updates that learn from the last rollout), so a value
carried by the environment at ``(b, i, t)`` comes from ``(b, i, t - 1)`` or,
at ``t = 0``, from ``(b, i - every, T - 1)``.
"""
from __future__ import annotations

from typing import NamedTuple

from tempo.api.functional import placeholder, where
from tempo.api.rt import RecurrentTensor, restart
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr, bound_of

RT = RecurrentTensor


class Transition(NamedTuple):
    """What ``env.step(a)`` of an autoresetting environment returns, over ``(b, i, t)``.

    ``obs[t]`` is the observation the policy sees next (``o[t + 1]``, or
    ``o[b, i + every, 0]`` after the rollout's last step): the first
    observation of a new episode when this step ended one. ``final_obs[t]``
    is the observation this step reached before any reset (equal to ``obs``
    when the episode goes on): bootstrap from its value at truncation.
    ``terminated`` (the MDP ended: no bootstrap) and ``truncated`` (a time
    limit: bootstrap) are bool; ``reward`` is float32.
    """

    obs: RT
    reward: RT
    terminated: RT
    truncated: RT
    final_obs: RT

    @property
    def done(self) -> RT:
        """``terminated | truncated``: the step ended an episode (the next observation is a reset)."""
        return self.terminated | self.truncated


def check_every(every) -> int:
    """``rollout_every`` as a positive int, or a TempoError naming the argument."""
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise TempoError(f"rollout_every must be a positive int (updates per rollout), got {every!r}", user_site())
    return every


def start_of_rollout(shape, dtype: str, dims: tuple[Expr, ...], first, every: int) -> RT:
    """A placeholder ``s[b, i]``: ``first`` for the first rollout (``i < every``); define the rest with
    :func:`continue_rollout`."""
    b, i = dims[0], dims[1]
    s = placeholder(shape, dtype, (b, i))
    s[i < every] = first
    return s


def continue_rollout(start: RT, following: RT, every: int) -> None:
    """``start[b, i + every] = following[b, i, T - 1]``: the next rollout starts where this one stopped."""
    b, i, t = following.domain
    start[b, i + every] = following[b, i, bound_of(t) - 1]


def carried(shape, dtype: str, dims: tuple[Expr, ...], first, every: int) -> tuple[RT, RT]:
    """``(x, start)``: ``x[b, i, t]`` starts each rollout at ``start[b, i]`` (``first`` in the first);
    define the rest with :func:`carry`."""
    b, i, _ = dims
    start = start_of_rollout(shape, dtype, dims, first, every)
    x = placeholder(shape, dtype, dims)
    x[b, i, 0] = start
    return x, start


def carry(x: RT, start: RT, following: RT, every: int) -> None:
    """``x[b, i, t + 1] = following`` within a rollout and across rollouts through ``start``."""
    b, i, t = x.domain
    x[b, i, t + 1] = following
    continue_rollout(start, following, every)


class EpisodeStatistics(tuple):
    """``(episode_return, episode_length)``, with the running sums each rollout starts from.

    Unpacks as a pair; :meth:`rollout_state` and :meth:`resume` checkpoint
    and restart the sums of the episodes still running at a rollout's start.
    """

    starts: dict[str, RT]

    def __new__(cls, episode_return: RT, episode_length: RT, starts: dict[str, RT]) -> "EpisodeStatistics":
        self = super().__new__(cls, (episode_return, episode_length))
        self.starts = starts
        return self

    def rollout_state(self) -> dict[str, RT]:
        """Each running sum as the rollout at ``i`` starts, one row per environment (over ``i``)."""
        return {name: start[0:bound_of(start.domain[0]), start.domain[1]] for name, start in self.starts.items()}

    def resume(self, ckpt) -> None:
        """Start the first rollout's running sums from a checkpoint of :meth:`rollout_state`."""
        restart_rows(self.starts, ckpt)


def restart_rows(starts: dict[str, RT], ckpt) -> None:
    """Restart each ``start[b, i]`` placeholder's first rollout from ``ckpt``'s rows (one per ``b``)."""
    missing = [name for name in starts if name not in ckpt.tensors]
    if missing:
        raise TempoError(f"the checkpoint has no tensor for {', '.join(missing)}", user_site())
    for name, start in starts.items():
        restart(start, ckpt.tensors[name], dims=start.domain[:1])


def episode_statistics(reward: RT, done: RT, every: int = 1, prefix: str = "episode") -> EpisodeStatistics:
    """``(episode_return, episode_length)`` over ``(b, i, t)``, counted across rollouts, like
    gymnasium's ``RecordEpisodeStatistics``.

    At a step where ``done`` holds they are the return (sum of rewards,
    undiscounted) and length of the episode that step ended; elsewhere they
    are the running sums of the episode so far. Read them where ``done``.
    ``prefix`` names the running sums in checkpoints.
    """
    dims = done.domain
    running, running_start = carried((), "float32", dims, 0.0, every)
    length, length_start = carried((), "int64", dims, 0, every)
    ret, steps = running + reward, length + 1
    carry(running, running_start, where(done, 0.0, ret), every)
    carry(length, length_start, where(done, 0, steps), every)
    return EpisodeStatistics(ret, steps, {f"{prefix}/return": running_start, f"{prefix}/length": length_start})
