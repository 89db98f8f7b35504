"""Return estimators against plain NumPy loops, on episodes that end inside the window."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.rl

GAMMA, LAM = 0.9, 0.8


def episodes(seed: int, shape: tuple[int, ...]):
    """Rewards, values and dones under mask semantics: after the first done, reward 0 and done stays."""
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=shape).astype(np.float32)
    value = rng.normal(size=shape).astype(np.float32)
    end = rng.integers(0, 2 * shape[-1], size=shape[:-1])  # about half of the episodes end in the window
    done = np.arange(shape[-1]) >= end[..., None]
    after_end = np.concatenate([np.zeros(shape[:-1] + (1,), bool), done[..., :-1]], axis=-1)
    reward[after_end] = 0.0
    return reward, value, done


# ----- NumPy references, one episode (a 1-d array over time) at a time -----
def ref_discounted(r):
    g, out = 0.0, np.zeros(len(r))
    for k in reversed(range(len(r))):
        g = r[k] + GAMMA * g
        out[k] = g
    return out


def ref_n_step(r, v, d, n):
    T = len(r)
    out = np.zeros(T)
    for k in range(T):
        out[k] = sum(GAMMA ** j * r[k + j] for j in range(min(n, T - k)))
        if v is not None and k + n < T:
            out[k] += GAMMA ** n * v[k + n] * (1.0 - (d[k + n - 1] if d is not None else 0.0))
    return out


def ref_gae(r, v, d, last_value=0.0):
    T = len(r)
    adv, ret, running = np.zeros(T), np.zeros(T), 0.0
    for k in reversed(range(T)):
        if k > 0 and d[k - 1]:  # after the end of the episode
            running = 0.0
            continue
        next_value = v[k + 1] if k + 1 < T else last_value
        live = 1.0 - d[k]
        delta = r[k] + GAMMA * live * next_value - v[k]
        running = delta + GAMMA * LAM * live * running
        adv[k], ret[k] = running, running + v[k]
    return adv, ret


def run(shape, build, seed=0):
    reward, value, done = episodes(seed, shape)
    with tpo.Context() as ctx:
        names = ("b", "i", "t")[-len(shape):]
        dims = [step for step, _ in ctx.dims(*names)]
        bounds = dict(zip((d.name.upper() for d in dims), shape))
        r, v, d = (tpo.from_numpy(x, dims=dims) for x in (reward, value, done))
        out = ctx.run(bounds, fetch=list(build(r, v, d)))
    return (reward, value, done), out


def per_episode(fn, *arrays):
    flat = [a.reshape(-1, a.shape[-1]) for a in arrays]
    return np.stack([fn(*rows) for rows in zip(*flat)]).reshape(arrays[0].shape)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_monte_carlo_returns(seed):
    (reward, _, done), (g,) = run((3, 2, 9), lambda r, v, d: [tempo.rl.discounted_returns(r, GAMMA)], seed)
    np.testing.assert_allclose(g, per_episode(ref_discounted, reward), rtol=1e-5, atol=1e-6)
    after_end = np.concatenate([np.zeros((3, 2, 1), bool), done[..., :-1]], axis=-1)
    assert (g[after_end] == 0).all() and after_end.any()


@pytest.mark.parametrize("n", [1, 3, 12])
def test_n_step_returns_with_and_without_bootstrap(n):
    def build(r, v, d):
        return [tempo.rl.n_step_returns(r, GAMMA, n), tempo.rl.n_step_returns(r, GAMMA, n, value=v, done=d)]

    (reward, value, done), (plain, boot) = run((4, 8), build, seed=n)
    np.testing.assert_allclose(plain, per_episode(lambda r: ref_n_step(r, None, None, n), reward),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(boot, per_episode(lambda r, v, d: ref_n_step(r, v, d, n), reward, value, done),
                               rtol=1e-5, atol=1e-6)
    after_end = np.concatenate([np.zeros((4, 1), bool), done[:, :-1]], axis=-1)
    assert (boot[after_end] == 0).all()


@pytest.mark.parametrize("seed", [0, 5])
def test_gae_is_the_backward_recurrence(seed):
    (reward, value, done), (adv, ret) = run((2, 3, 7), lambda r, v, d: tempo.rl.gae(r, v, d, GAMMA, LAM), seed)
    for key in np.ndindex(2, 3):
        ref_adv, ref_ret = ref_gae(reward[key], value[key], done[key])
        np.testing.assert_allclose(adv[key], ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret[key], ref_ret, rtol=1e-5, atol=1e-5)
    assert done[..., :-1].any() and (adv[..., 1:][done[..., :-1]] == 0).all()


def test_gae_bootstraps_from_last_value_and_runs_without_done():
    reward, value, _ = episodes(3, (2, 6))
    last = np.array([0.5, -2.0], np.float32)
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        r, v = tpo.from_numpy(reward, dims=(b, t)), tpo.from_numpy(value, dims=(b, t))
        adv, ret = tempo.rl.gae(r, v, None, GAMMA, LAM, last_value=tpo.from_numpy(last, dims=(b,)))
        adv, ret = ctx.run({B: 2, T: 6}, fetch=[adv, ret])
    for k in range(2):
        ref_adv, ref_ret = ref_gae(reward[k], value[k], np.zeros(6, bool), last_value=last[k])
        np.testing.assert_allclose(adv[k], ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret[k], ref_ret, rtol=1e-5, atol=1e-5)


def test_bad_inputs_are_named():
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        r = tpo.from_numpy(np.zeros((2, 3), np.float32), dims=(b, t))
        with pytest.raises(tpo.TempoError, match=r"int n >= 1, got 0"):
            tempo.rl.n_step_returns(r, GAMMA, 0)
        with pytest.raises(tpo.TempoError, match=r"scalar RTs \(per timestep\), got shape \(3,\)"):
            tempo.rl.discounted_returns(tpo.from_numpy(np.zeros((2, 3), np.float32), dims=(b,)), GAMMA)
        with pytest.raises(tpo.TempoError, match=r"does not vary with the time dim t"):
            tempo.rl.gae(r, tpo.from_numpy(np.zeros(2, np.float32), dims=(b,)), None, GAMMA, LAM)


def test_alive_is_one_through_the_ending_transition_then_zero():
    done = np.array([[False, False, True, True, True], [False, False, False, False, False]])
    with tpo.Context() as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        mask, = ctx.run({B: 2, T: 5}, fetch=[tpo.rl.alive(tpo.from_numpy(done, dims=(b, t)))])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


# ----- GAE over rollouts of autoresetting environments -----
def ref_rollout_gae(reward, value, next_value, terminated, done):
    """SB3-style GAE of one environment's rollout: truncation bootstraps from next_value, the last step
    from the value after the rollout."""
    adv, last = np.zeros(len(reward)), 0.0
    for k in reversed(range(len(reward))):
        delta = reward[k] + GAMMA * next_value[k] * (1.0 - terminated[k]) - value[k]
        last = delta + GAMMA * LAM * (1.0 - done[k]) * (last if k < len(reward) - 1 else 0.0)
        adv[k] = last
    return adv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_gae_bootstraps_at_truncation_and_across_the_rollout_boundary(seed):
    rng = np.random.default_rng(seed)
    shape = (3, 2, 17)
    reward, value, next_value = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    terminated = rng.random(shape) < 0.1
    truncated = (rng.random(shape) < 0.1) & ~terminated
    done = terminated | truncated
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        rts = [tpo.from_numpy(x, dims=(b, i, t)) for x in (reward, value, next_value, terminated, done)]
        adv, ret = tempo.rl.rollout_gae(*rts, GAMMA, LAM)
        got_adv, got_ret = ctx.run({B: 3, I: 2, T: 17}, fetch=[adv, ret])
    assert truncated.any() and terminated.any()
    for key in np.ndindex(3, 2):
        want = ref_rollout_gae(reward[key], value[key], next_value[key], terminated[key], done[key])
        np.testing.assert_allclose(got_adv[key], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_ret[key], want + value[key], rtol=1e-5, atol=1e-5)
