"""The worker pool that runs searches side by side: one core, one thread, the run's backend."""
import multiprocessing as mp
import os
import time

import pytest
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
        states = pool.map(_worker_state, [barrier, barrier], chunksize=1)
    affinity = [a for a, _, _ in states]
    assert all(len(a) == 1 and a <= cores for a in affinity)
    assert len(set().union(*affinity)) == min(2, len(cores))   # different cores where there are two
    assert [(t, b) for _, t, b in states] == [(1, "jax"), (1, "jax")]
    assert default_backend() == "torch"           # the parent's own backend is untouched


def _fail_or_wait(seconds: float) -> float:
    if seconds < 0:
        raise ValueError("this search failed")
    time.sleep(seconds)
    return seconds


def test_the_first_failure_stops_the_pool_without_waiting_for_the_rest():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="this search failed"):
        with pinned_pool(2, "torch") as pool:
            list(pool.imap_unordered(_fail_or_wait, [60.0, -1.0]))
    assert time.perf_counter() - start < 30      # the 60-second task was terminated
