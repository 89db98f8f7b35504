"""Searches side by side: a pool of worker processes, each on a CPU core of its own.

Training an agent or running a cost-model search is single-threaded work, so
several run at once on a multi-core machine. Each worker takes one core
(round-robin over the cores this process may use), one torch thread and the
run's measurement backend. Workers are spawned, not forked, so a parent that
has touched the GPU or torch's thread pools passes none of that on. Leaving
the pool on an error terminates its workers, so the first search to fail
stops the rest instead of leaving them to run out their budgets.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.pool import Pool


def _start(cores, backend: str) -> None:
    """Worker start: take a core of its own, one torch thread, the run's backend."""
    import torch

    from tempo.superopt.execute import set_default_backend

    os.sched_setaffinity(0, {cores.get()})
    torch.set_num_threads(1)
    set_default_backend(backend)


@contextmanager
def pinned_pool(workers: int, backend: str) -> Iterator[Pool]:
    """A pool of ``workers`` spawned processes, each pinned to one core, measuring on
    ``backend`` (:data:`~tempo.superopt.execute.BACKENDS`). Left normally, the workers finish
    and exit; left on an error, they are terminated. With more workers than cores, cores are
    shared round-robin."""
    ctx = mp.get_context("spawn")
    available = sorted(os.sched_getaffinity(0))
    with ctx.Manager() as manager:
        cores = manager.Queue()
        for i in range(workers):
            cores.put(available[i % len(available)])
        with ctx.Pool(workers, initializer=_start, initargs=(cores, backend)) as pool:
            yield pool
            pool.close()        # all went well: let the workers exit
            pool.join()
