"""Persistent gymnasium environments: one vector env of ``B`` environments that autoreset.

The host side is a gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv`` (one
subprocess per environment) in gymnasium's same-step autoreset mode, the
semantics CleanRL and Stable-Baselines3 train with: the step that ends an
episode returns the first observation of the next one, and the observation
it reached goes out as ``final_obs``. Environment ``b`` is reset once, at the
start of the run, with the seed :meth:`GymVectorEnv.reset_seed` gives it.
The vector env hands out its own observation buffer (``copy=False``), which
the host copies once per step into the UDF's output (gymnasium's default
deep-copies it first).

The UDFs are called once per step with every environment at once (the batch
dim ``b`` vectorized); they read ``b`` so the host can check that. A third
UDF hands each rollout's last observation to the next rollout, once per
rollout; where a checkpoint is written as that rollout starts, it first
snapshots the environments (:mod:`tempo.rl.pool_state`), and a resumed run
rebuilds the vector env from a snapshot instead of resetting it.

The step UDF also reads the observation its rollout starts from and the
previous step's ``terminated`` (``False`` at ``t = 0``), and ignores them:
they order the host calls by the environments' state, whatever the action
reads (a constant action reads no observation). A rollout's steps run after
the reset or the last rollout's carry-over, each after the one before, and
the reset runs even where nothing reads an observation.
"""
from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from tempo.api.context import current
from tempo.api.functional import eval_symbol, placeholder, udf
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.rl.env import Env
from tempo.rl.pool_state import OBS_KEY, POOL_KEY, PoolCheckpoints, PoolSnapshot, Snapshotting, factories, points_where
from tempo.rl.rollout import Transition, check_every, start_of_rollout
from tempo.symbolic.expr import Expr, bound_of

VECTOR_KINDS = ("sync", "async")


class _VectorHost:
    """The host side: a vector env made at the first reset, with as many environments as ``b`` has."""

    def __init__(self, name: str, kwargs: dict, sample_key: tuple[int, ...], obs_dtype: str,
                 box: tuple[np.ndarray, np.ndarray] | None, vector: str, every: int):
        self.name, self.kwargs, self.sample_key = name, kwargs, sample_key
        self.obs_dtype, self.box, self.vector, self.every = obs_dtype, box, vector, every
        self.envs: gymnasium.vector.VectorEnv | None = None
        self.checked = None  # the last index found to name every environment (a store hands on the same one)
        self.saves = PoolCheckpoints(name)

    def reset_seed(self, b: int) -> int:
        return int(np.random.SeedSequence([*self.sample_key, b]).generate_state(1)[0])

    def reset(self, index):
        count = self._count(index)
        self.close()
        make = gymnasium.vector.SyncVectorEnv if self.vector == "sync" else gymnasium.vector.AsyncVectorEnv
        if self.saves.resume_from is not None:
            obs = self._restore(make, count)
        else:
            self.envs = make([self._factory] * count, autoreset_mode=AutoresetMode.SAME_STEP, copy=False)
            obs, _ = self.envs.reset(seed=[self.reset_seed(b) for b in range(count)])
        obs = np.array(obs, dtype=self.obs_dtype)  # of the vector env's own buffer, which its next step overwrites
        self.saves.take(0, self.envs)
        return obs

    def carry_over(self, index, i, obs):
        """The observation the rollout at ``i + every`` starts from, after a snapshot if a checkpoint wants one."""
        self._count(index)
        self.saves.take(int(np.ravel(i)[0]) + self.every, self.envs)
        return np.array(obs, dtype=self.obs_dtype)

    def _restore(self, make, count: int) -> np.ndarray:
        saved = self.saves.resume_from
        if len(saved.envs) != count:
            raise TempoError(f"{self.name}: the checkpoint holds {len(saved.envs)} environments and this run "
                             f"has {count}: resume with {len(saved.envs)} environments", self.saves.resume_site)
        self.envs = make(factories(saved, wrap=self.vector == "async"), autoreset_mode=AutoresetMode.SAME_STEP,
                         copy=False)
        return self.saves.resume_obs

    def step(self, index, action, start, previous):
        """One step of every environment: ``(obs, reward, terminated, truncated, final_obs)``, arrays made
        for the call (the vector env copies its rewards and flags; its observations are copied here).
        ``start`` (the observation the rollout starts from) and ``previous`` (the previous step's
        ``terminated``) are not read: they order the call (see the module docstring)."""
        if index is not self.checked:
            self._count(index)
        if self.envs is None:
            raise RuntimeError(f"{self.name}: stepped before the reset")
        if self.box is not None:
            action = np.clip(action, *self.box).astype(self.box[0].dtype)
        elif action.__class__ is not np.ndarray or action.dtype != np.int64:
            action = np.asarray(action, np.int64)
        obs, reward, terminated, truncated, info = self.envs.step(action)
        obs = final = np.array(obs, dtype=self.obs_dtype)  # of the vector env's own buffer, as in reset
        if "_final_obs" in info:  # an episode ended: it reached final_obs, and obs is the next one's first
            final = obs.copy()
            for k in np.flatnonzero(info["_final_obs"]):
                final[k] = info["final_obs"][k]
        return obs, reward.astype(np.float32), terminated, truncated, final

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
            self.envs = None

    def _factory(self) -> gymnasium.Env:
        env = gymnasium.make(self.name, **self.kwargs)
        return Snapshotting(env) if self.vector == "async" else env

    def _count(self, index) -> int:
        if index is self.checked:
            return len(index)
        given = np.asarray(index)
        if given.ndim != 1 or not np.array_equal(given, np.arange(len(given))):
            raise RuntimeError(f"{self.name}: a vector environment steps every environment at once; it was "
                               f"called for environments {given.tolist()} (is the batch dim vectorized?)")
        self.checked = index
        return len(given)


class GymVectorEnv(Env):
    """A gymnasium environment over ``dims = (b, i, t)`` that persists across rollouts and autoresets.

    ``env.reset()`` is the observation each rollout starts from (an RT over
    ``(b, i)``); ``env.step(a)`` returns a :class:`tempo.rl.rollout.Transition`.
    ``rollout_every``: rollouts run at the multiples of it on ``i``.
    ``vector``: ``"sync"`` (one process) or ``"async"`` (a subprocess per
    environment).
    """

    def __init__(self, name: str, dims: tuple[Expr, ...], rollout_every: int = 1, vector: str = "sync", **kwargs):
        from tempo.rl.gym_env import _action_space, _gym_make

        site = user_site()
        if len(dims) != 3:
            raise TempoError(f"{name}: an autoresetting environment runs over dims (b, i, t): environments, "
                             f"rollouts and steps; got {len(dims)} dims", site)
        if vector not in VECTOR_KINDS:
            raise TempoError(f"vector={vector!r} is not one of {', '.join(map(repr, VECTOR_KINDS))}", site)
        env = _gym_make(name, kwargs)
        obs_space = env.observation_space
        if not isinstance(obs_space, gymnasium.spaces.Box):
            raise TempoError(f"{name}: an autoresetting environment takes Box observations, not {obs_space}", site)
        super().__init__(name, dims, tuple(obs_space.shape), str(obs_space.dtype),
                         *_action_space(name, env.action_space, site))
        env.close()
        self.max_episode_steps = env.spec.max_episode_steps if env.spec is not None else None
        self.every = check_every(rollout_every)
        box = None if self.is_discrete else (self.action_low, self.action_high)
        self._host = _VectorHost(name, kwargs, current().sample_key, self.obs_dtype, box, vector, self.every)
        self._start: RecurrentTensor | None = None

    def reset_seed(self, b: int) -> int:
        """The seed environment ``b`` is reset with (once, at the start of the run)."""
        return self._host.reset_seed(int(b))

    def reset(self) -> RecurrentTensor:
        """The observation each rollout starts from: the seeded reset, then where the last rollout stopped."""
        if self._start is None:
            b = self.dims[0]
            first = udf(self._host.reset, [eval_symbol(b)], [self.obs_shape], [self.obs_dtype],
                         label=f"{self.name}.reset", batched=True)
            self._start = start_of_rollout(self.obs_shape, self.obs_dtype, self.dims, first, self.every)
        return self._start

    def step(self, action: RecurrentTensor) -> Transition:
        """The :class:`~tempo.rl.rollout.Transition` of every environment for the action RT ``a[b, i, t]``."""
        self._claim_step(action)
        b, i, t = self.dims
        start = self.reset()
        previous = placeholder((), "bool", self.dims)  # the last step's terminated: orders the steps
        previous[b, i, 0] = False
        out = udf(self._host.step, [eval_symbol(b), action, start, previous],
                  [self.obs_shape, (), (), (), self.obs_shape], [self.obs_dtype, "float32", "bool", "bool",
                                                                 self.obs_dtype],
                  label=f"{self.name}.step", batched=True)
        step = Transition(*out)
        previous[b, i, t + 1] = step.terminated
        self._continue(start, step.obs)
        return step

    def _continue(self, start: RecurrentTensor, obs: RecurrentTensor) -> None:
        """``start[b, i + every]`` is the last step's ``obs``, through the host (which snapshots the
        environments there when a checkpoint asks)."""
        b, i, t = self.dims
        last = udf(self._host.carry_over, [eval_symbol(b), eval_symbol(i), obs[b, i, bound_of(t) - 1]],
                   [self.obs_shape], [self.obs_dtype], label=f"{self.name}.carry_over", batched=True)
        start[b, i + self.every] = last

    def rollout_state(self) -> dict[str, RecurrentTensor]:
        """The observation each rollout starts from, one row per environment (over ``i``); the environments
        themselves go into a checkpoint as its host state (:meth:`saved_state`). Reading it orders a
        checkpoint after the snapshot of the rollout's start."""
        b, i, _ = self.dims
        return {OBS_KEY: self.reset()[0:bound_of(b), i]}

    def save_when(self, when: Expr | None) -> None:
        """Snapshot the environments at the rollouts' starts where ``when`` (a condition on ``i``) holds,
        for :func:`tempo.checkpoint` with ``hosts=[env]``."""
        self._host.saves.wanted = points_where(when, self.dims[1], self.name)

    def saved_state(self, point: dict[str, int]) -> dict[str, np.ndarray]:
        """The snapshot taken as the rollout at ``point`` started, as checkpoint tensors."""
        return {POOL_KEY: self._host.saves.written(point[self.dims[1].name]).to_bytes()}

    def resume(self, ckpt) -> None:
        """Start from the environments saved in ``ckpt`` (a :class:`tempo.api.checkpoint.Checkpoint`) instead
        of resetting them: a run that resumes at the checkpoint's rollout repeats the saved run's episodes."""
        site = user_site()
        missing = [key for key in (POOL_KEY, OBS_KEY) if key not in ckpt.tensors]
        if missing:
            raise TempoError(f"{self.name}: the checkpoint holds no environment state ({', '.join(missing)}); "
                             f"write it with tpo.rl.checkpoint_rollouts, or tpo.checkpoint({{**env.rollout_state(), "
                             f"...}}, hosts=[env])", site)
        saved = PoolSnapshot.from_bytes(ckpt.tensors[POOL_KEY])
        if saved.env_id != self.name:
            raise TempoError(f"the checkpoint holds {saved.env_id!r} environments, not {self.name!r}: resume "
                             f"with --env-id {saved.env_id}", site)
        saves = self._host.saves
        saves.resume_from, saves.resume_site = saved, site
        saves.resume_obs = np.asarray(ckpt.tensors[OBS_KEY], dtype=self.obs_dtype)
