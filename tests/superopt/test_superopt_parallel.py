"""The worker pool that runs searches side by side: one core, one thread, the run's backend."""
import multiprocessing as mp
import os

import torch

from tempo.superopt.execute import default_backend
from tempo.superopt.parallel import pinned_pool


def _worker_state(barrier) -> tuple[set[int], int, str]:
    barrier.wait(timeout=120)           # both tasks at once: they run in different workers
    return os.sched_getaffinity(0), torch.get_num_threads(), default_backend()


def test_each_worker_takes_one_core_one_thread_and_the_backend():
    cores = set(os.sched_getaffinity(0))
    with mp.get_context("spawn").Manager() as manager, pinned_pool(2, "jax") as pool:
        barrier = manager.Barrier(2)
        states = [f.result() for f in [pool.submit(_worker_state, barrier) for _ in range(2)]]
    affinity = [a for a, _, _ in states]
    assert all(len(a) == 1 and a <= cores for a in affinity)
    assert len(set().union(*affinity)) == min(2, len(cores))   # different cores where there are two
    assert [(t, b) for _, t, b in states] == [(1, "jax"), (1, "jax")]
    assert default_backend() == "torch"           # the parent's own backend is untouched
