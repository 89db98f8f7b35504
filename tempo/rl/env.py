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

IMPLS = ("gymnasium", "tensor")


class Env:
    """An environment over ``dims``; subclasses implement ``reset`` and ``step``.

    Attributes: ``name``, ``dims``, ``obs_shape``, ``obs_dtype``, ``obs_size``
    (elements per observation), ``num_actions`` (discrete action spaces, else
    None), ``action_shape`` and ``action_dtype``.
    """

    def __init__(self, name: str, dims: tuple[Expr, ...], obs_shape: tuple[int, ...], obs_dtype: str,
                 num_actions: int | None, action_shape: tuple[int, ...], action_dtype: str):
        self.name, self.dims = name, dims
        self.obs_shape, self.obs_dtype = tuple(obs_shape), obs_dtype
        self.obs_size = math.prod(self.obs_shape)
        self.num_actions, self.action_shape, self.action_dtype = num_actions, tuple(action_shape), action_dtype
        self._stepped = False

    def __repr__(self) -> str:
        space = f"{self.num_actions} actions" if self.num_actions is not None else f"actions {self.action_shape}"
        dims = ", ".join(d.name for d in self.dims)
        return f"{type(self).__name__}({self.name!r}, dims=({dims}), obs {self.obs_shape}, {space})"

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
        if self.num_actions is not None and np.dtype(action.dtype).kind not in "iu":
            raise TempoError(f"{self.name}: actions are discrete, so the action RT must have an integer dtype, "
                             f"not {action.dtype}", site)
        if tuple(action.shape) != self.action_shape:
            raise TempoError(f"{self.name}: the action RT has shape {tuple(action.shape)}, the environment "
                             f"takes actions of shape {self.action_shape}", site)
        extra = set(action.domain) - set(self.dims)
        if extra:
            raise TempoError(f"{self.name}: the action varies with {', '.join(sorted(d.name for d in extra))}, "
                             f"which is not a dim of the environment", site)
        self._stepped = True


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
    (``CartPole-v1``, ``tempo/Synthetic-v0``). The default is ``"tensor"`` for
    the ``tempo/`` environments and ``"gymnasium"`` for every other name.

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
    if autoreset:
        from tempo.rl.gym_vector_env import GymVectorEnv

        return GymVectorEnv(name, dims, **kwargs)
    return GymEnv(name, dims, **kwargs)


def _tensor_envs() -> dict:
    from tempo.rl.cartpole import CartPole
    from tempo.rl.synthetic import Synthetic

    return {"CartPole-v1": CartPole, "tempo/Synthetic-v0": Synthetic}


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def unknown_env_error(name: str, known) -> TempoError:
    """A TempoError for an environment id nobody registered, with close matches."""
    return TempoError(f"unknown environment {name!r}{_suggest(name, known)}", user_site())
