"""Environments as recurrent tensors, and ``make``, which picks one by name.

An environment is built over a tuple of dims ``(b, ..., t)``: the first is the
batch dim (one environment instance per ``b``), the last is the time dim, and
the dims between (usually one iteration dim ``i``) each start a fresh episode.
``env.reset()`` is an RT over ``dims[:-1]``; ``env.step(a)`` maps an action RT
over ``dims`` to ``(obs, reward, done)`` over ``dims``:

    o[b, i, 0] = env.reset()
    o[b, i, t + 1], r, d = env.step(a)

Mask semantics: ``r[t]`` and ``d[t]`` belong to the transition taken by
``a[t]`` from ``o[t]`` to ``o[t + 1]``. ``d[t]`` is true when the episode
ended at that transition or earlier (terminated or truncated); the reward of
the ending transition is kept, and every later step of the same episode
reports ``done=True``, ``reward=0`` and repeats the last observation.
"""
from __future__ import annotations

import difflib
import math
from typing import Sequence

import numpy as np

from tempo.api.context import current
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.symbolic.expr import Expr

IMPLS = ("gymnasium", "tensor", "envpool")


class Env:
    """An environment over ``dims``; subclasses implement ``reset`` and ``step``.

    Attributes: ``name``, ``dims``, ``obs_shape``, ``obs_dtype``, ``obs_size``
    (elements per observation), ``is_discrete``, ``action_shape``,
    ``action_dtype``, ``action_size`` (elements per action) and the action
    bounds ``action_low`` / ``action_high`` (NumPy arrays of
    ``action_shape``: a Box space's bounds, ``0`` and ``n - 1`` for
    ``Discrete(n)``). ``num_actions`` is the number of discrete actions; a
    continuous (Box) environment has none, and reading it is an error that
    says what to use instead. Continuous actions are clipped to the bounds
    when the environment steps (the policy's log-probability keeps the
    unclipped action, as CleanRL's ``ClipAction`` does).
    """

    def __init__(self, name: str, dims: tuple[Expr, ...], obs_shape: tuple[int, ...], obs_dtype: str,
                 num_actions: int | None, action_shape: tuple[int, ...], action_dtype: str,
                 action_low=None, action_high=None):
        self.name, self.dims = name, dims
        self.obs_shape, self.obs_dtype = tuple(obs_shape), obs_dtype
        self.obs_size = math.prod(self.obs_shape)
        self.is_discrete = num_actions is not None
        self._num_actions, self.action_shape, self.action_dtype = num_actions, tuple(action_shape), action_dtype
        self.action_size = math.prod(self.action_shape)
        self.action_low, self.action_high = self._bounds(action_low, action_high)
        self._stepped = False

    def _bounds(self, low, high) -> tuple[np.ndarray, np.ndarray]:
        if self.is_discrete:
            return np.zeros((), self.action_dtype), np.full((), self._num_actions - 1, self.action_dtype)
        low = np.full(self.action_shape, -np.inf) if low is None else low
        high = np.full(self.action_shape, np.inf) if high is None else high
        return (np.broadcast_to(np.asarray(low, self.action_dtype), self.action_shape).copy(),
                np.broadcast_to(np.asarray(high, self.action_dtype), self.action_shape).copy())

    @property
    def num_actions(self) -> int:
        """How many discrete actions there are (``Discrete(n)``: ``n``); an error for a Box space."""
        if not self.is_discrete:
            raise TempoError(f"{self.name} has a continuous action space {self.action_space}, so it has no "
                             f"num_actions: size the policy's output with env.action_size ({self.action_size}) "
                             f"and sample from tpo.nn.Normal (e.g. tpo.nn.DiagGaussianHead)", user_site())
        return self._num_actions

    @property
    def action_space(self) -> str:
        """The action space in gymnasium's notation: ``Discrete(2)``, ``Box(-2.0, 2.0, (1,), float32)``."""
        if self.is_discrete:
            return f"Discrete({self._num_actions})"
        low, high = (_bound_text(x) for x in (self.action_low, self.action_high))
        return f"Box({low}, {high}, {self.action_shape}, {self.action_dtype})"

    def __repr__(self) -> str:
        dims = ", ".join(d.name for d in self.dims)
        return f"{type(self).__name__}({self.name!r}, dims=({dims}), obs {self.obs_shape}, {self.action_space})"

    def reset(self) -> RecurrentTensor:
        """The first observation of each episode, an RT over ``dims[:-1]``."""
        raise NotImplementedError

    def step(self, action: RecurrentTensor) -> tuple[RecurrentTensor, RecurrentTensor, RecurrentTensor]:
        """``(obs, reward, done)`` over ``dims`` for the action RT ``a[b, i, t]``.

        ``obs[t]`` is the observation after the action ``a[t]`` (so it defines
        ``o[t + 1]``); ``reward[t]`` (float32) and ``done[t]`` (bool) belong to
        the same transition; after the end of an episode see the module's mask
        semantics.
        """
        raise NotImplementedError

    # ----- helpers for subclasses -----
    @property
    def episode_dims(self) -> tuple[Expr, ...]:
        """The dims that index one episode: all but the time dim."""
        return self.dims[:-1]

    def _claim_step(self, action) -> None:
        site = user_site()
        if self._stepped:
            raise TempoError(f"{self.name}: env.step was already called; an environment steps one action "
                             f"stream, so make a second environment for a second one", site)
        if not isinstance(action, RecurrentTensor):
            raise TempoError(f"{self.name}: env.step takes an action RT, not {type(action).__name__}", site)
        self._check_action_kind(action, site)
        if tuple(action.shape) != self.action_shape:
            raise TempoError(f"{self.name}: the action RT has shape {tuple(action.shape)}, the environment "
                             f"takes actions of shape {self.action_shape} ({self.action_space})", site)
        extra = set(action.domain) - set(self.dims)
        if extra:
            raise TempoError(f"{self.name}: the action varies with {', '.join(sorted(d.name for d in extra))}, "
                             f"which is not a dim of the environment", site)
        self._stepped = True

    def _check_action_kind(self, action: RecurrentTensor, site) -> None:
        """A discrete policy on a Box space, or a continuous one on a Discrete space, is the user's mistake."""
        kind = np.dtype(action.dtype).kind
        if self.is_discrete and kind not in "iu":
            raise TempoError(f"{self.name} has a discrete action space {self.action_space}, but the action RT is "
                             f"{action.dtype}: a continuous policy (tpo.nn.Normal) cannot act here; sample "
                             f"integer actions from tpo.nn.Categorical(logits=...) with env.num_actions logits",
                             site)
        if not self.is_discrete and kind != "f":
            raise TempoError(f"{self.name} has a continuous action space {self.action_space}, but the action RT "
                             f"is {action.dtype}: a discrete policy (tpo.nn.Categorical) cannot act here; sample "
                             f"float actions of shape {self.action_shape} from tpo.nn.Normal (e.g. "
                             f"tpo.nn.DiagGaussianHead(env.action_size))", site)


def _bound_text(bound: np.ndarray) -> str:
    """One number when every element of a bound is the same, else the array."""
    flat = np.unique(bound)
    return str(flat[0]) if flat.size == 1 else np.array2string(bound, separator=", ")


def check_dims(dims: Sequence[Expr]) -> tuple[Expr, ...]:
    """``dims`` as a tuple of the current context's dims, in its order."""
    ctx, site = current(), user_site()
    dims = tuple(dims)
    if not dims or any(not (isinstance(d, Expr) and d.is_symbol and d.kind == "step") for d in dims):
        raise TempoError("an environment's dims are step symbols from ctx.dims(...), batch first and time "
                         f"last, e.g. dims=(b, i, t); got {dims!r}", site)
    if ctx.order(dims) != dims:
        order = ", ".join(d.name for d in ctx.order(dims))
        raise TempoError(f"environment dims must follow the context's dim order ({order})", site)
    return dims


def make(name: str, dims: Sequence[Expr], impl: str | None = None, autoreset: bool = False, **kwargs) -> Env:
    """An environment ``name`` over ``dims = (b, ..., t)`` (batch first, time last).

    With ``autoreset=True`` the environments persist across rollouts over
    ``dims = (b, i, t)`` and reset themselves when an episode ends (CleanRL
    and Stable-Baselines3 semantics, :mod:`tempo.rl.rollout`): ``step``
    returns a ``Transition``; ``rollout_every=k`` runs rollouts at every
    k-th ``i``; gymnasium environments take ``vector="sync"`` or
    ``"async"``.

    ``impl="gymnasium"`` runs a gymnasium environment on the host through UDF
    ops (any registered id; ``kwargs`` go to ``gymnasium.make``);
    ``impl="tensor"`` builds a built-in environment from tensor ops only
    (``Acrobot-v1``, ``CartPole-v1``, ``Pendulum-v1``, ``tempo/Synthetic-v0``);
    ``impl="envpool"`` steps envpool's C++ environments through the same UDF
    ops (``kwargs`` go to ``envpool.make``; needs the ``envpool`` package).
    The default is ``"tensor"`` for the ``tempo/`` environments and
    ``"gymnasium"`` for every other name.

    >>> import tempo as tpo, tempo.rl
    >>> with tpo.Context() as ctx:
    ...     (b, B), (t, T) = ctx.dims("b", "t")
    ...     env = tempo.rl.make("CartPole-v1", dims=(b, t), impl="tensor")
    >>> env.obs_shape, env.num_actions
    ((4,), 2)
    """
    from tempo.rl.gym_env import GymEnv

    tensor_envs = _tensor_envs()
    dims, site = check_dims(dims), user_site()
    if not isinstance(name, str):
        raise TempoError(f"environment names are strings, not {type(name).__name__}", site)
    if impl is None:
        impl = "tensor" if name.startswith("tempo/") else "gymnasium"
    if impl not in IMPLS:
        raise TempoError(f"impl={impl!r} is not one of {', '.join(map(repr, IMPLS))}", site)
    if impl == "tensor":
        if name not in tensor_envs:
            known = ", ".join(sorted(tensor_envs))
            raise TempoError(f"no tensor implementation of {name!r}{_suggest(name, tensor_envs)}; "
                             f"tensor environments: {known}", site)
        options = {"autoreset": True, **kwargs} if autoreset else kwargs
        return tensor_envs[name](name, dims, **options)
    if name in tensor_envs and name.startswith("tempo/"):
        raise TempoError(f"{name!r} exists only as a tensor environment: use impl='tensor'", site)
    if impl == "envpool":
        from tempo.rl.envpool_env import EnvPoolEnv

        if autoreset:
            raise TempoError("autoreset=True runs gymnasium vector envs or tensor envs; impl='envpool' steps "
                             "episodes only", site)
        return EnvPoolEnv(name, dims, **kwargs)
    if autoreset:
        from tempo.rl.gym_vector_env import GymVectorEnv

        return GymVectorEnv(name, dims, **kwargs)
    return GymEnv(name, dims, **kwargs)


def _tensor_envs() -> dict:
    from tempo.rl.acrobot import Acrobot
    from tempo.rl.cartpole import CartPole
    from tempo.rl.pendulum import Pendulum
    from tempo.rl.synthetic import Synthetic

    return {"Acrobot-v1": Acrobot, "CartPole-v1": CartPole, "Pendulum-v1": Pendulum, "tempo/Synthetic-v0": Synthetic}


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def unknown_env_error(name: str, known) -> TempoError:
    """A TempoError for an environment id nobody registered, with close matches."""
    return TempoError(f"unknown environment {name!r}{_suggest(name, known)}", user_site())
