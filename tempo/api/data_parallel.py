"""Data-parallel replicas of one Tempo program.

Inside ``with tpo.data_parallel(rank, world, all_reduce):`` every program
built is one replica of a data-parallel job:

- modules start from the same parameters in every replica (``tpo.nn``
  initialisation is keyed by the context seed only), while random tensors
  (``tpo.random``) and gymnasium environments are also keyed by ``rank``, so
  each replica samples its own experience;
- every ``Optimizer.step()`` applies the mean of the replicas' gradients:
  one UDF per iteration flattens the gradients, sums them across replicas
  with ``all_reduce`` and divides by ``world``.

``all_reduce(x)`` takes and returns a flat float32 NumPy array and must give
every replica the same sum (e.g. a ``torch.distributed`` all-reduce, or one
of ``tempo.gmi``'s reduction strategies), so the replicas' parameters stay
identical.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tempo.api.functional import udf
from tempo.api.replicas import AllReduce, Replica, active, data_parallel

__all__ = ["AllReduce", "Replica", "active", "data_parallel", "mean_over_replicas"]


def mean_over_replicas(grads: Sequence, replica: Replica) -> list:
    """The replicas' mean of each gradient RT (one all-reduce per point of their domain)."""
    shapes = [tuple(g.shape) for g in grads]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    dtypes = [g.dtype for g in grads]

    def reduce(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        flat = np.concatenate([np.asarray(a, dtype=np.float32).reshape(-1) for a in arrays])
        total = np.asarray(replica.all_reduce(flat), dtype=np.float32) / replica.world
        parts = np.split(total, np.cumsum(sizes)[:-1])
        return tuple(p.reshape(s).astype(d) for p, s, d in zip(parts, shapes, dtypes))

    out = udf(reduce, list(grads), shapes, dtypes, label="all_reduce_mean")
    return list(out) if isinstance(out, (tuple, list)) else [out]
