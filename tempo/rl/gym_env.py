"""Gymnasium environments run on the host through UDF ops.

Each episode (a point of ``dims[:-1]``, e.g. ``(b, i)``) gets its own
gymnasium environment from a pool, reset with a seed drawn from the context
seed and the episode's indices, and handed back to the pool when the episode
ends (or after the last timestep), so a time dim that ends at run time
(``tpo.end_when``) reuses them too. The UDFs take the episode indices as an input (``tpo.eval_symbol``
of each episode dim), so the host function knows which environments it
serves. They are ``batched``: called with one episode's inputs, or with a
leading axis of episodes once the batch dim is vectorized.

The step UDF also reads ``done`` of the previous timestep (the reset's
``False`` at ``t = 0``). That input carries the mask semantics and orders the
calls: step ``t`` of an episode runs after step ``t - 1`` and after its reset.
"""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium
import numpy as np
from gymnasium import spaces

from tempo.api.context import current
from tempo.api.functional import cat, eval_symbol, placeholder, udf
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.rl.env import Env, unknown_env_error
from tempo.symbolic.expr import Expr, bound_of


@dataclass
class _Episode:
    env: gymnasium.Env | None  # None once the episode is over (its environment serves another)
    last_obs: np.ndarray  # the reset's, then the ending step's: what the steps after the end repeat


class _Episodes:
    """The host side: one gymnasium environment per running episode.

    A call converts its inputs once (the episode indices, steps left and ended
    flags to Python ints and bools, the actions' rows as NumPy values) and
    writes each episode's outputs into arrays made for the call, which copies
    every observation once: what the program keeps is never the environment's
    own array. An episode keeps a copy of its observation only where the steps
    after its end repeat it (its reset's and its ending step's)."""

    def __init__(self, name: str, kwargs: dict, sample_key: tuple[int, ...], first: gymnasium.Env, obs_dtype: str,
                 action_ndim: int, box: tuple[np.ndarray, np.ndarray] | None):
        self.name, self.kwargs, self.sample_key = name, kwargs, sample_key
        self.obs_dtype, self.action_ndim, self.box = np.dtype(obs_dtype), action_ndim, box
        self.obs_shape = tuple(first.observation_space.shape)
        self.free = [first]
        self.running: dict[tuple[int, ...], _Episode] = {}

    def reset_seed(self, key: tuple[int, ...]) -> int:
        return episode_seed(self.sample_key, key)

    def reset(self, key):
        keys, batched = episode_keys(key)
        obs = np.empty((len(keys), *self.obs_shape), self.obs_dtype)
        for row, k in enumerate(keys):
            obs[row] = self._reset_one(k)
        done = np.zeros(len(keys), dtype=bool)
        return (obs, done) if batched else (obs[0], done[0])

    def step(self, key, steps_left, action, ended):
        keys, batched = episode_keys(key)
        n = len(keys)
        lefts, ends, actions = scalars(steps_left, n), scalars(ended, n), rows(action, self.action_ndim, n)
        obs = np.empty((n, *self.obs_shape), self.obs_dtype)
        reward, done = np.empty(n, np.float32), np.empty(n, bool)
        for row in range(n):
            reward[row], done[row] = self._step_one(keys[row], lefts[row], actions[row], ends[row], obs, row)
        return (obs, reward, done) if batched else (obs[0], reward[0], done[0])

    def _reset_one(self, key: tuple[int, ...]) -> np.ndarray:
        episode = self.running.pop(key, None)
        env = episode.env if episode is not None and episode.env is not None else \
            self.free.pop() if self.free else self._make()
        obs, _ = env.reset(seed=self.reset_seed(key))
        obs = np.array(obs, dtype=self.obs_dtype)
        self.running[key] = _Episode(env, obs)
        return obs

    def _step_one(self, key, steps_left: int, action, ended: bool, obs: np.ndarray, row: int) -> tuple:
        """Step the episode at ``key``, its observation written into ``obs[row]`` (an ended one is not
        stepped: its last observation, reward 0 and done again); the step's reward and done."""
        episode = self.running.get(key)
        if episode is None:
            raise RuntimeError(f"{self.name}: episode {key} was stepped before it was reset")
        if ended:
            obs[row] = episode.last_obs
            reward, done = 0.0, True
        else:
            # a NumPy int, as a vector env passes it (gymnasium's Discrete.contains checks it faster than an int)
            if self.box is None:
                action = action if action.__class__ is np.int64 else np.int64(action)
            else:
                action = np.clip(action, *self.box).astype(self.box[0].dtype)
            obs[row], reward, terminated, truncated, _ = episode.env.step(action)  # a copy of the environment's
            done = terminated or truncated
            if done:  # the episode is over: its environment serves the next one
                episode.last_obs = obs[row].copy()
                self.free.append(episode.env)
                episode.env = None
        if steps_left == 0:
            self.running.pop(key)
            if episode.env is not None:
                self.free.append(episode.env)
        return reward, done

    def _make(self) -> gymnasium.Env:
        return gymnasium.make(self.name, **self.kwargs)


def episode_seed(sample_key: tuple[int, ...], key: tuple[int, ...]) -> int:
    """The reset seed of one episode, from the context's sample key and the episode's indices."""
    return int(np.random.SeedSequence([*sample_key, *key]).generate_state(1)[0])


def episode_keys(key) -> tuple[list[tuple[int, ...]], bool]:
    """The episode indices of a call, each a tuple of Python ints, and whether the call is batched
    (``key`` has a leading axis of episodes)."""
    key = np.asarray(key)
    listed = key.tolist()
    return ([tuple(row) for row in listed], True) if key.ndim == 2 else ([tuple(listed)], False)


def rows(x, ndim: int, n: int) -> np.ndarray:
    """``x`` with a leading axis of ``n`` rows (broadcast when it has none)."""
    x = np.asarray(x)
    return x if x.ndim > ndim else np.broadcast_to(x, (n,) + x.shape)


def scalars(x, n: int) -> list:
    """The ``n`` rows of ``x``, an array of scalars with a leading axis of rows or without one
    (the same for every row), as Python scalars."""
    x = np.asarray(x)
    return x.tolist() if x.ndim else [x.item()] * n


def _gym_make(name: str, kwargs: dict) -> gymnasium.Env:
    from tempo.rl.env import _tensor_envs

    if name not in gymnasium.envs.registry:
        raise unknown_env_error(name, list(gymnasium.envs.registry) + list(_tensor_envs()))
    try:
        return gymnasium.make(name, **kwargs)
    except Exception as err:  # missing extras (box2d, mujoco), bad keyword arguments
        raise TempoError(f"gymnasium.make({name!r}) failed: {type(err).__name__}: {err}", user_site()) from err


def _action_space(name: str, space, site) -> tuple:
    """``(num_actions, action_shape, action_dtype, low, high)`` of a gymnasium action space."""
    if isinstance(space, spaces.Discrete):
        if int(space.start) != 0:
            raise TempoError(f"{name}: action space {space} starts at {space.start}; only Discrete spaces that "
                             f"start at 0 are supported", site)
        return int(space.n), (), "int64", None, None
    if isinstance(space, spaces.Box):
        return None, tuple(space.shape), str(space.dtype), space.low, space.high
    raise TempoError(f"{name}: action space {space} is not supported (Discrete or Box)", site)


class GymEnv(Env):
    """A gymnasium environment over ``dims``, stepped on the host (see the module docstring).

    ``max_episode_steps`` is the truncation limit of the gymnasium spec (None
    when it has none). ``reset_seed(key)`` gives the seed the episode at
    ``key = (b, i)`` is reset with (``i`` counted from the first run: the
    context's ``start`` shifts it).
    """

    host_class = _Episodes  # the host side, built from the probe environment

    def __init__(self, name: str, dims: tuple[Expr, ...], **kwargs):
        site = user_site()
        if len(dims) < 2:
            raise TempoError(f"{name}: an environment needs a batch dim and a time dim, e.g. dims=(b, t)", site)
        env, self.max_episode_steps = self._probe(name, kwargs)
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, (spaces.Box, spaces.Discrete)):
            raise TempoError(f"{name}: observation space {obs_space} is not supported (Box or Discrete)", site)
        obs_dtype = "int64" if isinstance(obs_space, spaces.Discrete) else str(obs_space.dtype)
        super().__init__(name, dims, tuple(obs_space.shape), obs_dtype, *_action_space(name, act_space, site))
        box = None if self.is_discrete else (self.action_low, self.action_high)
        self._host = self.host_class(name, kwargs, current().sample_key, env, obs_dtype, len(self.action_shape), box)
        self._reset: tuple[RecurrentTensor, RecurrentTensor] | None = None
        self._offsets = tuple(current().offset(d) for d in self.episode_dims)

    def _probe(self, name: str, kwargs: dict):
        """An environment that tells the spaces, and the truncation limit."""
        env = _gym_make(name, kwargs)
        return env, env.spec.max_episode_steps if env.spec is not None else None

    def reset_seed(self, key: tuple[int, ...]) -> int:
        return self._host.reset_seed(tuple(key))

    def reset(self, initial_state=None) -> RecurrentTensor:
        """The first observation of each episode (gymnasium ``reset`` with a per-episode seed).

        Given initial states are for tensor environments only (``impl="tensor"``).
        """
        if initial_state is not None:
            raise TempoError(f"{self.name}: a gymnasium environment starts from its seeded reset; "
                             f"initial_state needs impl='tensor'", user_site())
        return self._reset_outputs()[0]

    def step(self, action: RecurrentTensor) -> tuple[RecurrentTensor, RecurrentTensor, RecurrentTensor]:
        self._claim_step(action)
        _, reset_done = self._reset_outputs()
        outer, t = self.episode_dims, self.dims[-1]
        ended = placeholder((), "bool", self.dims)
        ended[(*outer, 0)] = reset_done
        steps_left = eval_symbol(bound_of(t) - 1 - t)
        obs, reward, done = udf(self._host.step, [self._episode_key(), steps_left, action, ended],
                                [self.obs_shape, (), ()], [self.obs_dtype, "float32", "bool"],
                                label=f"{self.name}.step", batched=True)
        ended[(*outer, t + 1)] = done
        return obs, reward, done

    step.__doc__ = Env.step.__doc__

    def _reset_outputs(self) -> tuple[RecurrentTensor, RecurrentTensor]:
        if self._reset is None:
            self._reset = udf(self._host.reset, [self._episode_key()], [self.obs_shape, ()],
                              [self.obs_dtype, "bool"], label=f"{self.name}.reset", batched=True)
        return self._reset

    def _episode_key(self) -> RecurrentTensor:
        return cat([eval_symbol(d + k if k else d).unsqueeze(0)
                    for d, k in zip(self.episode_dims, self._offsets)])
