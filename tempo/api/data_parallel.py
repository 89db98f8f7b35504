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

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError, user_site

AllReduce = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Replica:
    """This process's place in a data-parallel job."""

    rank: int
    world: int
    all_reduce: AllReduce


_ACTIVE: list[Replica] = []


@contextlib.contextmanager
def data_parallel(rank: int, world: int, all_reduce: AllReduce) -> Iterator[Replica]:
    """Build programs as replica ``rank`` of ``world`` (see the module docstring)."""
    if not 0 <= rank < world:
        raise TempoError(f"replica rank must be in [0, {world}), got {rank}", user_site())
    replica = Replica(rank, world, all_reduce)
    _ACTIVE.append(replica)
    try:
        yield replica
    finally:
        _ACTIVE.remove(replica)


def active() -> Replica | None:
    """The innermost ``data_parallel`` replica, or None outside one."""
    return _ACTIVE[-1] if _ACTIVE else None


def mean_over_replicas(grads: Sequence, replica: Replica) -> list:
    """The replicas' mean of each gradient RT (one all-reduce per point of their domain)."""
    from tempo.api.functional import udf

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
