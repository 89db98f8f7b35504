"""tpo.data_parallel: replicas share initial parameters, sample their own data, average gradients."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tempo as tpo

ITERS, N, LR = 6, 8, 0.1
TRUE_W = np.array([1.0, -2.0, 0.5], dtype=np.float32)


class ThreadAllReduce:
    """A real all-reduce among threads: each caller gets the sum of every caller's array."""

    def __init__(self, world: int):
        self.world, self.parts = world, {}
        self.barrier = threading.Barrier(world)
        self.calls = 0

    def for_rank(self, rank: int):
        def all_reduce(x: np.ndarray) -> np.ndarray:
            self.parts[rank] = x.copy()
            self.barrier.wait()
            total = sum(self.parts[r] for r in range(self.world))
            self.barrier.wait()
            if rank == 0:
                self.calls += 1
            return total
        return all_reduce


def regression(rank: int | None, all_reduce=None):
    """Linear regression on per-iteration random inputs; a compiled program and its fetches."""
    def build():
        with tpo.Context(seed=3) as ctx:
            (i, I), = ctx.dims("i")
            model = tpo.nn.Linear(3, 1, dims=(i,))
            x = tpo.random.normal((N, 3), dims=(i,))
            y = x @ tpo.from_numpy(TRUE_W)
            loss = ((model(x).squeeze(1) - y) ** 2.0).mean()
            loss.backward()
            tpo.optim.SGD(model.parameters(), lr=LR).step()
            fetch = [x, model.weight, model.bias]
            return ctx.compile(fetch=fetch), I
    if rank is None:
        return build()
    with tpo.data_parallel(rank, 2, all_reduce):
        return build()


def run_replicas():
    reducer = ThreadAllReduce(2)
    programs = [regression(r, reducer.for_rank(r)) for r in range(2)]
    results: list = [None, None]

    def run(r: int) -> None:
        program, I = programs[r]
        results[r] = program.run({I: ITERS})

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results, reducer


def test_replicas_sample_their_own_data_from_the_same_initial_parameters():
    program, I = regression(None)
    solo_x, solo_w, _ = program.run({I: ITERS})
    (x0, w0, _), (x1, w1, _) = run_replicas()[0]
    np.testing.assert_array_equal(w0[0], solo_w[0])  # initialisation ignores the rank
    np.testing.assert_array_equal(w1[0], solo_w[0])
    np.testing.assert_array_equal(x0[0], solo_x[0])  # rank 0 samples what a lone program samples
    assert not np.allclose(x1, x0)                    # rank 1 samples its own inputs


def test_replicas_apply_the_mean_gradient_and_stay_identical():
    (results, reducer) = run_replicas()
    (x0, w0, b0), (x1, w1, b1) = results
    np.testing.assert_array_equal(w0, w1)
    np.testing.assert_array_equal(b0, b1)
    assert reducer.calls == ITERS - 1  # one all-reduce per update: iterations 0 .. ITERS-2
    # SGD on the mean of the two replicas' gradients, by hand from their sampled inputs
    w, b = w0[0].astype(np.float64), b0[0].astype(np.float64)
    for k in range(ITERS):
        np.testing.assert_allclose(w0[k], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b0[k], b, rtol=1e-5, atol=1e-6)
        grads_w, grads_b = [], []
        for x in (x0[k], x1[k]):
            err = (x @ w).squeeze(1) + b - x @ TRUE_W
            grads_w.append(2.0 / N * x.T @ err[:, None])
            grads_b.append(np.array([2.0 / N * err.sum()]))
        w = w - LR * np.mean(grads_w, axis=0)
        b = b - LR * np.mean(grads_b, axis=0)


def test_rank_outside_the_world_is_an_error():
    with pytest.raises(tpo.TempoError, match=r"rank must be in \[0, 2\)"):
        with tpo.data_parallel(2, 2, lambda x: x):
            pass
