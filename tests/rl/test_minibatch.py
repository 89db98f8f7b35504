"""Minibatch epochs over a rollout: shuffles from the counter-based generator, and CleanRL's PPO loss."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.rl
from tempo.rl.minibatch import Minibatches

N, EPOCHS, MINIBATCHES = 12, 2, 3


def orders(seed: int, updates: int, start: int = 0, table: np.ndarray | None = None):
    """Each update's minibatch (sample indices) and, with ``table``, the rows ``select`` gathers."""
    with tpo.Context(seed=seed, start={"i": start}) as ctx:
        (i, I), = ctx.dims("i")
        batches = Minibatches(i, N, EPOCHS, MINIBATCHES)
        fetch = [batches.order()]
        if table is not None:
            fetch.append(batches.select(tpo.from_numpy(table, dims=(i,))))
        return ctx.run({I: updates}, fetch=fetch)


def test_each_epoch_is_a_fresh_partition_of_the_rollout():
    order, = orders(seed=3, updates=3 * EPOCHS * MINIBATCHES)
    assert order.shape == (18, N // MINIBATCHES)
    epochs = order.reshape(-1, MINIBATCHES * (N // MINIBATCHES))
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(N))
    assert len({tuple(e) for e in epochs}) == len(epochs)  # reshuffled every epoch


def test_select_gathers_the_rollouts_rows_in_minibatch_order():
    updates = 2 * EPOCHS * MINIBATCHES
    table = np.random.default_rng(0).normal(size=(updates, N, 3)).astype(np.float32)
    order, rows = orders(seed=1, updates=updates, table=table)
    for u in range(updates):
        rollout = (u // (EPOCHS * MINIBATCHES)) * EPOCHS * MINIBATCHES
        np.testing.assert_array_equal(rows[u], table[rollout][order[u]])


def test_shuffles_reproduce_and_a_resumed_run_shuffles_as_the_uninterrupted_one():
    whole, = orders(seed=7, updates=12)
    again, = orders(seed=7, updates=12)
    other, = orders(seed=8, updates=12)
    np.testing.assert_array_equal(whole, again)
    assert not np.array_equal(whole, other)
    resumed, = orders(seed=7, updates=6, start=6)  # stopped after 6 updates, an epoch boundary
    np.testing.assert_array_equal(resumed, whole[6:])


def test_the_rollout_must_split_into_equal_minibatches():
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        with pytest.raises(tpo.TempoError, match="equal size"):
            Minibatches(i, 10, 2, 3)
        with pytest.raises(tpo.TempoError, match="epochs"):
            Minibatches(i, 12, 0, 3)


def reference_loss(logp, logp_old, adv, value, value_old, ret, ent, clip=0.2, ent_coef=0.01, vf_coef=0.5):
    """CleanRL's minibatch loss in NumPy (float64)."""
    adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(logp - logp_old)
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip)).mean()
    clipped = value_old + np.clip(value - value_old, -clip, clip)
    v = 0.5 * np.maximum((value - ret) ** 2, (clipped - ret) ** 2).mean()
    kl = ((ratio - 1) - (logp - logp_old)).mean()
    frac = (np.abs(ratio - 1) > clip).mean()
    return pg - ent_coef * ent.mean() + vf_coef * v, pg, v, ent.mean(), kl, frac


@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_minibatch_loss_matches_cleanrl(seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(scale=0.3, size=16).astype(np.float32) for _ in range(7)]
    with tpo.Context() as ctx:
        loss = tempo.rl.ppo_minibatch_loss(*(tpo.from_numpy(x) for x in arrays))
        got = ctx.run({}, fetch=list(loss))
    want = reference_loss(*(x.astype(np.float64) for x in arrays))
    np.testing.assert_allclose([float(g) for g in got], want, rtol=1e-4, atol=1e-6)


def test_target_kl_stops_the_rest_of_the_rollouts_epochs():
    # 2 epochs x 3 minibatches per rollout; the kl of each update
    kl = np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.0,     # epoch 0 ends past the target: epoch 1 is skipped
                   0.0, 0.5, 0.0, 0.0, 0.0, 0.9,     # a mid-epoch spike does not count; the last epoch's end
                   0.0, 0.0, 0.0, 0.0, 0.0, 0.0], np.float32)  # a new rollout updates again
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        keep = Minibatches(i, N, EPOCHS, MINIBATCHES).keep_updating(tpo.from_numpy(kl, dims=(i,)), 0.1)
        got, = ctx.run({I: len(kl)}, fetch=[keep])
    want = [True] * 3 + [False] * 3 + [True] * 6 + [True] * 6
    assert got.tolist() == want


def test_a_gated_step_leaves_parameters_and_adam_state_as_they_were():
    with tpo.Context(seed=0) as ctx:
        (i, I), = ctx.dims("i")
        w = tpo.nn.parameter(np.ones(3, np.float32), dims=(i,), name="w")
        ((w - 2.0) ** 2.0).sum().backward()
        adam = tpo.optim.Adam([w], lr=0.1)
        adam.step(when=(tpo.eval_symbol(i) % 3) != 1)
        got, m = ctx.run({I: 6}, fetch=[w, adam.states["0.w/m"]])
    np.testing.assert_array_equal(got[2], got[1])         # update 1 skipped
    np.testing.assert_array_equal(m[2], m[1])             # its moments too
    assert not np.array_equal(got[1], got[0]) and not np.array_equal(got[3], got[2])
