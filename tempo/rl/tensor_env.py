"""Built-in environments written with tensor ops only (no UDF), so they fuse,
vectorize and run on any backend.

A :class:`TensorEnv` describes its dynamics with three pure functions of RTs
(``initial_state``, ``transition``, ``observe``); the base class threads the
state through a placeholder over ``dims`` and applies the truncation limit
and the mask semantics of :mod:`tempo.rl.env` in one place.
"""
from __future__ import annotations

import numpy as np

from tempo.api.functional import eval_symbol, from_numpy, full, maximum, minimum, placeholder, where
from tempo.api.rt import RecurrentTensor
from tempo.errors import TempoError, user_site
from tempo.rl.env import Env
from tempo.rl.rollout import Transition, carried, carry, check_every, restart_rows
from tempo.symbolic.expr import Expr, bound_of

RT = RecurrentTensor


class TensorEnv(Env):
    """Base class of the tensor environments.

    Subclasses set ``state_shape`` and ``state_dtype`` and implement
    ``initial_state(dims)`` (a random initial state at every point of
    ``dims``), ``transition(state, action) -> (next_state, reward,
    terminated)`` and ``observe(state)``. ``max_episode_steps`` truncates
    every episode after that many steps (None: never).

    With ``autoreset=True`` (dims ``(b, i, t)``) the environments persist
    across rollouts, taken at every ``rollout_every``-th ``i``: the state and
    the steps taken in the episode are carried (:mod:`tempo.rl.rollout`), an
    episode that ends restarts from a fresh initial state drawn at that
    step, and ``step`` returns a :class:`~tempo.rl.rollout.Transition`.
    A continuous environment gives its action bounds (``action_low``,
    ``action_high``); ``transition`` then sees actions clipped to them.
    """

    state_shape: tuple[int, ...] = ()
    state_dtype: str = "float32"

    def __init__(self, name: str, dims: tuple[Expr, ...], obs_shape, obs_dtype, num_actions, action_shape,
                 action_dtype, max_episode_steps: int | None, action_low=None, action_high=None,
                 autoreset: bool = False, rollout_every: int = 1):
        if autoreset and len(dims) != 3:
            raise TempoError(f"{name}: an autoresetting environment runs over dims (b, i, t): environments, "
                             f"rollouts and steps; got {len(dims)} dims", user_site())
        if len(dims) < 2:
            raise TempoError(f"{name}: an environment needs a batch dim and a time dim, e.g. dims=(b, t)",
                             user_site())
        if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps < 1):
            raise TempoError(f"{name}: max_episode_steps must be a positive int or None, got "
                             f"{max_episode_steps!r}", user_site())
        super().__init__(name, dims, obs_shape, obs_dtype, num_actions, action_shape, action_dtype, action_low,
                         action_high)
        self.max_episode_steps = max_episode_steps
        self.autoreset, self.every = autoreset, check_every(rollout_every)
        self._state0: RT | None = None
        self._carried: tuple[RT, RT, RT, RT] | None = None  # state and its start, steps taken and their start

    # ----- the dynamics, written by subclasses -----
    def initial_state(self, dims: tuple[Expr, ...]) -> RT:
        raise NotImplementedError

    def transition(self, state: RT, action: RT) -> tuple[RT, RT, RT]:
        raise NotImplementedError

    def observe(self, state: RT) -> RT:
        raise NotImplementedError

    # ----- the Env interface -----
    def reset(self, initial_state=None) -> RT:
        """The first observation of each episode.

        ``initial_state`` replaces the environment's random initial state: an
        RT over (some of) the episode dims, or an array shaped ``(*lead,
        *state_shape)`` whose leading axes are bound to the first episode
        dims (``(B, 4)`` for CartPole over ``(b, i, t)``: one state per
        ``b``). It can only be given before the first ``reset``/``step``.
        """
        if self.autoreset:
            if initial_state is not None:
                raise TempoError(f"{self.name}: an autoresetting environment starts from random initial states",
                                 user_site())
            return self.observe(self._rollout_state()[1])
        if initial_state is not None:
            if self._state0 is not None:
                raise TempoError(f"{self.name}: initial_state must be given to the first reset(), before "
                                 f"step()", user_site())
            self._state0 = self._given_state(initial_state)
        return self.observe(self._initial())

    def step(self, action: RT):
        self._claim_step(action)
        if self.autoreset:
            return self._autoreset_step(action)
        outer, t = self.episode_dims, self.dims[-1]
        state = placeholder(self.state_shape, self.state_dtype, self.dims)
        ended = placeholder((), "bool", self.dims)
        state[(*outer, 0)] = self._initial()
        ended[(*outer, 0)] = False
        moved, reward, done = self.transition(state, self._clipped(action))
        if self.max_episode_steps is not None:
            done = done | (eval_symbol(t) >= self.max_episode_steps - 1)
        next_state = where(ended, state, moved)
        state[(*outer, t + 1)] = next_state
        done = ended | done
        ended[(*outer, t + 1)] = done
        return self.observe(next_state), where(ended, 0.0, reward.cast("float32")), done

    step.__doc__ = Env.step.__doc__

    def _clipped(self, action: RT) -> RT:
        if self.is_discrete:
            return action
        action = action.cast(self.action_dtype)
        return minimum(maximum(action, from_numpy(self.action_low)), from_numpy(self.action_high))

    def _initial(self) -> RT:
        if self._state0 is None:
            self._state0 = self.initial_state(self.episode_dims)
        return self._state0

    def _rollout_state(self) -> tuple[RT, RT, RT, RT]:
        if self._carried is None:
            first = self.initial_state(self.dims[:1])
            state = carried(self.state_shape, self.state_dtype, self.dims, first, self.every)
            steps = carried((), "int64", self.dims, 0, self.every)
            self._carried = (*state, *steps)
        return self._carried

    def rollout_state(self) -> dict[str, RT]:
        """The state and steps taken of every environment as the rollout at ``i`` starts (over ``i``),
        for a checkpoint at a rollout's start (``autoreset=True``)."""
        return {name: rows[0:bound_of(self.dims[0]), self.dims[1]] for name, rows in self._starts().items()}

    def resume(self, ckpt) -> None:
        """Start the first rollout from a checkpoint of :meth:`rollout_state`."""
        restart_rows(self._starts(), ckpt)

    def _starts(self) -> dict[str, RT]:
        if not self.autoreset:
            raise TempoError(f"{self.name}: only autoresetting environments carry state across iterations; "
                             f"episodes start from the context's seed", user_site())
        _, state_start, _, steps_start = self._rollout_state()
        return {"env/state": state_start, "env/steps": steps_start}

    def _autoreset_step(self, action: RT) -> Transition:
        state, state_start, steps, steps_start = self._rollout_state()
        moved, reward, terminated = self.transition(state, self._clipped(action))
        terminated, taken = terminated.cast("bool"), steps + 1
        limit = self.max_episode_steps
        truncated = full((), False, "bool") if limit is None else taken >= limit
        done = terminated | truncated
        next_state = where(done, self.initial_state(self.dims), moved)
        carry(state, state_start, next_state, self.every)
        carry(steps, steps_start, where(done, 0, taken), self.every)
        reward = where(done, reward, reward).cast("float32")  # over (b, i, t) even when constant
        return Transition(self.observe(next_state), reward, terminated, truncated, self.observe(moved))

    def _given_state(self, value) -> RT:
        site = user_site()
        if isinstance(value, RT):
            if tuple(value.shape) != self.state_shape or not set(value.domain) <= set(self.episode_dims):
                raise TempoError(f"{self.name}: initial_state must be an RT of shape {self.state_shape} over "
                                 f"the episode dims, got {value!r}", site)
            return value.cast(self.state_dtype) if value.dtype != self.state_dtype else value
        array = np.asarray(value, dtype=self.state_dtype)
        lead = array.ndim - len(self.state_shape)
        if lead < 0 or lead > len(self.episode_dims) or array.shape[lead:] != self.state_shape:
            raise TempoError(f"{self.name}: initial_state must be shaped (*lead, *{self.state_shape}) with at most"
                             f" {len(self.episode_dims)} leading axes, got {array.shape}", site)
        return from_numpy(array, dims=self.episode_dims[:lead])
