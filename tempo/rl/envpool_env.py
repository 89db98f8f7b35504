"""envpool environments run on the host through UDF ops (``tpo.rl.make(name, dims, impl="envpool")``).

The same UDFs as :mod:`tempo.rl.gym_env` (reset and step per episode, with
the mask semantics of :mod:`tempo.rl.env`), but each running episode holds
one slot of an envpool instance (handed back after its last step), and a
batched call resets or steps all its episodes with one call into
envpool's C++ loop instead of one Python call per environment. envpool seeds each environment once, when its
instance is made (here from the context seed and the instance's number),
and draws every later reset from that environment's own generator: it
ignores per-reset seeds. So a program run twice gives the same numbers,
but an episode's start depends on the slot it runs in and on how many
resets that slot saw before. envpool cannot save or restore its
environments, so a resumed run (``Context(start=...)``, ``env.resume``, a
checkpoint with ``hosts=[env]``) is a ``TempoError``: the gymnasium path
resumes bit for bit. envpool's simulators are its own, so trajectories differ from
gymnasium's. Ended episodes are not stepped, so envpool's auto-reset never
fires.

envpool runs its environments on ``num_threads`` worker threads (a keyword
of ``make``; 1 by default here, for one-thread comparisons and shared
machines).
"""
from __future__ import annotations

import numpy as np

from tempo.api.context import current
from tempo.errors import TempoError, user_site
from tempo.rl.env import _suggest
from tempo.rl.gym_env import GymEnv, episode_keys, episode_seed, rows


class _Pools:
    """The host side: envpool instances, a slot per running episode, and each running episode's last obs."""

    def __init__(self, name: str, kwargs: dict, sample_key: tuple[int, ...], first, obs_dtype: str,
                 action_ndim: int, box: tuple[np.ndarray, np.ndarray] | None):
        self.name, self.kwargs, self.sample_key = name, kwargs, sample_key
        self.obs_dtype, self.action_ndim, self.box = obs_dtype, action_ndim, box
        self.pools: list = []
        self.slot: dict[tuple[int, ...], tuple[int, int]] = {}  # running episode -> (pool, env id)
        self.free: list[tuple[int, int]] = []  # slots of finished episodes
        self.last_obs: dict[tuple[int, ...], np.ndarray] = {}

    def reset(self, key):
        keys, batched = episode_keys(key)
        self._assign(keys)
        obs = np.empty((len(keys), *self._obs_shape()), self.obs_dtype)
        for pool, picked, ids in self._by_pool(keys, range(len(keys))):
            out, info = pool.reset(ids)
            obs[picked] = _in_order(out, info, ids)
        for k, o in zip(keys, obs):
            self.last_obs[k] = o
        done = np.zeros(len(keys), dtype=bool)
        return (obs, done) if batched else (obs[0], done[0])

    def step(self, key, steps_left, action, ended):
        keys, batched = episode_keys(key)
        n = len(keys)
        missing = [k for k in keys if k not in self.last_obs]
        if missing:
            raise RuntimeError(f"{self.name}: episode {missing[0]} was stepped before it was reset")
        action, ended, steps_left = rows(action, self.action_ndim, n), rows(ended, 0, n), rows(steps_left, 0, n)
        obs = np.stack([self.last_obs[k] for k in keys])
        reward, done = np.zeros(n, np.float32), ended.astype(bool).copy()
        live = [r for r in range(n) if not ended[r]]
        for pool, picked, ids in self._by_pool(keys, live):
            out, rew, terminated, truncated, info = pool.step(self._actions(action[picked]), ids)
            obs[picked], reward[picked] = _in_order(out, info, ids), _in_order(rew, info, ids)
            done[picked] = _in_order(terminated | truncated, info, ids)
        for r, k in enumerate(keys):
            self.last_obs[k] = obs[r]
            if steps_left[r] == 0:
                del self.last_obs[k]
                self.free.append(self.slot.pop(k))
        out = obs, reward, done
        return out if batched else tuple(x[0] for x in out)

    def _actions(self, action: np.ndarray) -> np.ndarray:
        if self.box is None:
            return action.astype(np.int32)
        return np.clip(action, *self.box).astype(self.box[0].dtype)

    def _assign(self, keys: list[tuple[int, ...]]) -> None:
        """A slot for every episode in ``keys`` that has none: a free one, else one of a new instance."""
        new = [k for k in dict.fromkeys(keys) if k not in self.slot]
        while new and self.free:
            self.slot[new.pop(0)] = self.free.pop(0)
        if new:
            seed = episode_seed(self.sample_key, (len(self.pools),)) % 2 ** 31
            self.pools.append(_envpool_make(self.name, len(new), {"seed": seed, **self.kwargs}))
            self.slot.update({k: (len(self.pools) - 1, e) for e, k in enumerate(new)})

    def _by_pool(self, keys, picked_rows):
        """``(pool, rows, env ids)`` for each pool that holds some of ``picked_rows``."""
        groups: dict[int, list[int]] = {}
        for r in picked_rows:
            groups.setdefault(self.slot[keys[r]][0], []).append(r)
        for p, picked in groups.items():
            yield self.pools[p], picked, np.array([self.slot[keys[r]][1] for r in picked], dtype=np.int32)

    def _obs_shape(self) -> tuple[int, ...]:
        return tuple(self.pools[0].observation_space.shape)


def _in_order(values: np.ndarray, info: dict, ids: np.ndarray) -> np.ndarray:
    """envpool's outputs reordered to the env ids they were asked for."""
    got = np.asarray(info["env_id"])
    if np.array_equal(got, ids):
        return values
    row = {int(e): j for j, e in enumerate(got)}
    return np.asarray(values)[[row[int(e)] for e in ids]]


def _envpool_make(name: str, num_envs: int, kwargs: dict):
    import envpool

    options = {"num_threads": 1, **kwargs}
    try:
        return envpool.make(name, env_type="gymnasium", num_envs=num_envs, **options)
    except Exception as err:  # bad keyword arguments, missing assets
        raise TempoError(f"envpool.make({name!r}) failed: {type(err).__name__}: {err}", user_site()) from err


CANNOT_RESUME = ("envpool environments cannot save or restore their state, so a resumed run would not repeat "
                 "the episodes of the run it continues; impl='gymnasium' resumes bit for bit")


class EnvPoolEnv(GymEnv):
    """An envpool environment over ``dims`` (see the module docstring); ``kwargs`` go to ``envpool.make``."""

    host_class = _Pools

    def __init__(self, name: str, dims, **kwargs):
        ctx = current()
        resumed = {d.name: ctx.offset(d) for d in dims if ctx.offset(d)}
        if resumed:
            raise TempoError(f"{name}: {CANNOT_RESUME} (this run continues an earlier one at "
                             f"{', '.join(f'{k}={v}' for k, v in resumed.items())})", user_site())
        super().__init__(name, dims, **kwargs)

    def save_when(self, when) -> None:
        """envpool environments are not checkpointed: always a TempoError."""
        raise TempoError(f"{self.name}: {CANNOT_RESUME}", user_site())

    def resume(self, ckpt) -> None:
        """envpool environments do not resume: always a TempoError."""
        raise TempoError(f"{self.name}: {CANNOT_RESUME}", user_site())

    def reset_seed(self, key: tuple[int, ...]) -> int:
        raise TempoError(f"{self.name}: envpool ignores per-episode reset seeds (it seeds each environment once, "
                         f"when made); impl='gymnasium' resets every episode with its own seed", user_site())

    def _probe(self, name: str, kwargs: dict):
        site = user_site()
        try:
            import envpool
        except ImportError as err:
            raise TempoError("impl='envpool' needs the envpool package (pip install 'tempo-dl[rl]'); "
                             "impl='gymnasium' runs the same environments without it", site) from err
        known = envpool.list_all_envs()
        if name not in known:
            raise TempoError(f"envpool has no environment {name!r}{_suggest(name, known)}; impl='gymnasium' "
                             f"runs any gymnasium id", site)
        probe = _envpool_make(name, 1, kwargs)
        return probe, getattr(probe.spec.config, "max_episode_steps", None)
