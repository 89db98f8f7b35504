"""Checkpoints of rollout training, taken where a rollout starts, and resuming there.

A checkpoint written as the rollout at update ``r`` starts holds everything
that rollout and its updates start from: the optimizer's states as update
``r`` reads them (parameters, Adam's moments and step count), the running
sums and statistics carried from the last rollout (``rollout_state()`` of
each carried object: episode statistics, observation and reward
normalisation, a tensor environment's state), and a gymnasium vector env's
environments (its host state, :mod:`tempo.rl.pool_state`). A run built the
same way in ``tpo.Context(start={"i": r})`` that calls
:func:`resume_rollouts` draws the same random numbers from ``r`` on
(actions, shuffles) and so repeats the uninterrupted run bit for bit.
"""
from __future__ import annotations

from typing import Sequence

from tempo.api.checkpoint import Checkpoint, HostState, checkpoint
from tempo.api.context import current
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr


def checkpoint_rollouts(path: str, i: Expr, every: int, optimizer, carried: Sequence) -> RT:
    """Write ``path`` as a rollout starts at each update ``i`` that is a multiple of ``every`` (counted
    globally: ``Context(start=...)`` shifts ``i``), except this run's first.

    ``carried``: the objects whose state crosses rollouts, each with
    ``rollout_state()`` (and a gymnasium vector env's host state).
    """
    offset = current().offset(i)
    state = dict(optimizer.states)
    for item in carried:
        state.update(item.rollout_state())
    when = (((i + offset) % every) == 0) & (i > 0)
    return checkpoint(state, path, when=when, hosts=[item for item in carried if isinstance(item, HostState)])


def rollout_start(ckpt: Checkpoint | None, rollout_every: int, updates: int) -> int:
    """The update a checkpoint of :func:`checkpoint_rollouts` resumes at (``Context(start={"i": ...})``),
    0 without one (``ckpt`` None); an error where it was not written at a rollout's start or after the
    run's last update (``updates``)."""
    if ckpt is None:
        return 0
    site = user_site()
    if "i" not in ckpt.point:
        raise TempoError(f"the checkpoint names no update (its point is {ckpt.point})", site)
    start = ckpt.point["i"]
    if start % rollout_every:
        raise TempoError(f"the checkpoint was written at update {start}, not at a rollout's start (a multiple "
                         f"of {rollout_every} updates: update_epochs * num_minibatches)", site)
    if start >= updates:
        raise TempoError(f"the checkpoint was written after update {start}: the run of {updates} updates is over",
                         site)
    return start


def resume_rollouts(ckpt: Checkpoint, optimizer, carried: Sequence, num_envs: int) -> None:
    """Start the optimizer and every carried object from ``ckpt`` (call before ``ctx.run``)."""
    site = user_site()
    for item in carried:
        for name in item.rollout_state():
            saved = ckpt.tensors.get(name)
            if saved is not None and len(saved) != num_envs:
                raise TempoError(f"the checkpoint holds {len(saved)} environments ({name}) and this run has "
                                 f"{num_envs}: resume with {len(saved)} environments", site)
    for item in carried:  # first, so a checkpoint of another environment is named as such
        item.resume(ckpt)
    optimizer.resume(ckpt)
