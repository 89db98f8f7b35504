"""The replica stack of ``tpo.data_parallel`` (see :mod:`tempo.api.data_parallel`): which replica
of a data-parallel job the programs built now belong to."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
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
    """Build programs as replica ``rank`` of ``world`` (see :mod:`tempo.api.data_parallel`)."""
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
