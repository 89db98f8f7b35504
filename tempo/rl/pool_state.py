"""The state of a gymnasium vector env, saved into a checkpoint and restored from it.

A snapshot holds each sub-environment pickled whole: the wrappers
gymnasium.make put around it (``TimeLimit``'s elapsed steps,
``OrderEnforcing``'s reset flag, the passive checker's flags), the
environment's physical state and its ``np_random`` generator, and anything
else it keeps. Pickling an environment that inherits gymnasium's
``EzPickle`` (the MuJoCo ones) would rebuild it fresh from its
constructor's arguments; these are pickled by their attributes instead, so
a MuJoCo environment keeps its ``MjData`` (positions, velocities, time,
warm start: everything ``mj_step`` reads).
Restoring makes a vector env whose sub-environments are the unpickled ones,
so their next steps, and the auto-resets those steps trigger, repeat the
saved run bit for bit.

A sync vector env is pickled in place; an async one runs each environment
in a subprocess inside :class:`Snapshotting`, which pickles it there.

The snapshot is a pickle: restore only checkpoints you trust, as with any
pickle.
"""
from __future__ import annotations

import functools
import io
import pickle
from dataclasses import dataclass

import gymnasium
import numpy as np
from gymnasium.utils import EzPickle

from tempo.errors import TempoError, user_site
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr

FORMAT = 1
POOL_KEY = "env_pool"  # the checkpoint tensor that holds a vector env's snapshot
OBS_KEY = "env/obs"  # and the one that holds what its environments show next


def _set_attributes(obj, state: dict) -> None:
    obj.__dict__.update(state)


class _Pickler(pickle.Pickler):
    """Pickles ``EzPickle`` objects by their attributes rather than by their constructor's arguments."""

    def reducer_override(self, obj):
        if isinstance(obj, EzPickle):
            return object.__new__, (type(obj),), obj.__dict__, None, None, _set_attributes
        return NotImplemented


def pickled(env: gymnasium.Env) -> bytes:
    """``env`` with its whole state, as bytes :func:`pickle.loads` restores."""
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(env)
    return out.getvalue()


class Snapshotting(gymnasium.Wrapper):
    """An async vector env's sub-environment: :meth:`pickled_env` pickles the environment it wraps."""

    def pickled_env(self) -> bytes:
        return pickled(self.env)


def unpickled(blob: bytes, wrap: bool) -> gymnasium.Env:
    """The environment of :func:`pickled`, wrapped in :class:`Snapshotting` for an async vector env."""
    env = pickle.loads(blob)  # noqa: S301  a checkpoint is trusted as a pickle is
    return Snapshotting(env) if wrap else env


@dataclass
class PoolSnapshot:
    """What a vector env of ``len(envs)`` environments of ``env_id`` resumes from."""

    env_id: str
    envs: list[bytes]

    def to_bytes(self) -> np.ndarray:
        """The snapshot as a uint8 array, for a checkpoint's tensors."""
        blob = pickle.dumps({"format": FORMAT, "env_id": self.env_id, "envs": self.envs})
        return np.frombuffer(blob, dtype=np.uint8)

    @staticmethod
    def from_bytes(data: np.ndarray) -> "PoolSnapshot":
        """The snapshot of :meth:`to_bytes`."""
        state = pickle.loads(np.asarray(data, dtype=np.uint8).tobytes())  # noqa: S301  trusted as a pickle
        if state.get("format") != FORMAT:
            raise TempoError(f"the checkpoint's environments are saved in format {state.get('format')!r}; this "
                             f"version reads format {FORMAT}", user_site())
        return PoolSnapshot(state["env_id"], state["envs"])


def snapshot(env_id: str, envs: gymnasium.vector.VectorEnv) -> PoolSnapshot:
    """Every sub-environment of ``envs`` (sync or async) pickled."""
    if isinstance(envs, gymnasium.vector.SyncVectorEnv):
        blobs = [pickled(env) for env in envs.envs]
    else:
        blobs = list(envs.call("pickled_env"))
    return PoolSnapshot(env_id, blobs)


def factories(saved: PoolSnapshot, wrap: bool) -> list:
    """One environment factory per saved environment, for a vector env's constructor."""
    return [functools.partial(unpickled, blob, wrap) for blob in saved.envs]


class PoolCheckpoints:
    """A vector env's side of checkpoints: where to snapshot it, the snapshots a checkpoint has yet to
    write (by local point of ``i``), and the snapshot a resumed run starts from."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.wanted = None  # local point -> bool; None: no checkpoint asks for the pool
        self.pending: dict[int, PoolSnapshot] = {}
        self.resume_from: PoolSnapshot | None = None
        self.resume_obs: np.ndarray | None = None  # what the saved environments show next
        self.resume_site = None

    def take(self, point: int, envs: gymnasium.vector.VectorEnv) -> None:
        """Snapshot ``envs`` as the rollout at ``point`` starts, if a checkpoint is written there."""
        if self.wanted is not None and self.wanted(point):
            self.pending[point] = snapshot(self.env_id, envs)

    def written(self, point: int) -> PoolSnapshot:
        """The snapshot taken for ``point``, handed to its checkpoint once."""
        if point not in self.pending:
            raise RuntimeError(f"{self.env_id}: the environments are saved as a rollout starts (i a multiple of "
                               f"rollout_every); none starts at i={point}")
        return self.pending.pop(point)


def points_where(when: Expr | None, i: Expr, env_id: str):
    """``when`` (a condition on ``i`` alone, or None: everywhere) as a test of a local point of ``i``."""
    if when is None:
        return lambda point: True
    others = sorted(s.name for s in when.free_symbols() if s.name != i.name)
    if others:
        raise TempoError(f"{env_id}: the environments are saved where a condition on {i.name} alone holds; "
                         f"{when} also names {', '.join(others)}", user_site())
    test = compile_expr(when)
    return lambda point: bool(test({i.name: point}))
