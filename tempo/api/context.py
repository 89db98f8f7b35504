"""The Context: temporal dimensions, the SDG under construction, and ``run``."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tempo.api.replicas import active
from tempo.config import Config
from tempo.errors import DomainError, TempoError, user_site
from tempo.ir.sdg import SDG
from tempo.symbolic.expr import Expr, step_and_bound

_STACK: list["Context"] = []


def current() -> "Context":
    """The innermost active context (``with ctx:``)."""
    if not _STACK:
        raise TempoError("no active tempo Context: build recurrent tensors inside `with ctx:`", user_site())
    return _STACK[-1]


class Context:
    """Holds a program's temporal dimensions and its symbolic dependence graph.

    ``seed`` seeds every random tensor of the program (``tpo.random``), its
    gymnasium environments and the initialisation of ``tpo.nn`` modules.
    Built inside ``tpo.data_parallel``, the context is one replica: random
    tensors and environments are also keyed by the replica's rank, module
    initialisation is not.

    ``start`` continues an earlier run: ``start={"i": 100}`` makes step ``i``
    of this program draw the random numbers and environment episodes of step
    ``i + 100`` of a run from 0, so a run resumed from a checkpoint taken
    after 100 iterations repeats, bit for bit, what the uninterrupted run
    would have computed (the program itself shifts anything else that
    depends on the step, such as a learning-rate schedule).

    >>> ctx = Context()
    >>> with ctx:
    ...     (t, T), = ctx.dims("t")
    """

    def __init__(self, seed: int = 0, start: dict[str, int] | None = None) -> None:
        if not isinstance(seed, int) or not 0 <= seed < 2 ** 38:
            raise TempoError(f"seed must be an int in [0, 2**38), got {seed!r}", user_site())
        for name, first in (start or {}).items():
            if not isinstance(first, int) or isinstance(first, bool) or first < 0:
                raise TempoError(f"start[{name!r}] must be a non-negative int, got {first!r}", user_site())
        self.start = dict(start or {})
        self.sdg = SDG()
        self.dim_order: list[Expr] = []
        self.seed = seed
        self.replica = active()
        self._streams = 0
        self.parameters: set[int] = set()  # node ids of parameters: leaves for autodiff
        self.grads: dict[tuple[int, int], object] = {}  # (node id, output) -> gradient RT
        self.roots: list[int] = []  # nodes that always run: sinks, parameters, optimizer state

    def new_stream(self) -> int:
        """A fresh random stream id: the seed and the count of streams so far."""
        self._streams += 1
        return (self.seed << 24) + self._streams

    def sample_stream(self) -> int:
        """A fresh stream for random tensors: :meth:`new_stream`, mixed with the replica's rank if any."""
        stream = self.new_stream()
        if self.replica is None or self.replica.rank == 0:
            return stream
        mixed = np.random.SeedSequence([stream, self.replica.rank]).generate_state(1, np.uint64)[0]
        return int(mixed) >> 2  # bits 62 and 63 stay free for the generator's sub-streams

    @property
    def sample_key(self) -> tuple[int, ...]:
        """The entropy that seeds environments: the seed, and the replica's rank if any."""
        if self.replica is None or self.replica.rank == 0:
            return (self.seed,)
        return (self.seed, self.replica.rank, self.replica.world)

    def __enter__(self) -> "Context":
        _STACK.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _STACK.remove(self)

    def dims(self, *names: str) -> tuple[tuple[Expr, Expr], ...]:
        """Declare temporal dimensions; each gives its (step, bound) symbol pair."""
        out = []
        for name in names:
            if not name.isidentifier():
                raise TempoError(f"dimension name {name!r} is not an identifier", user_site())
            step, bound = step_and_bound(name)
            if step in self.dim_order:
                raise TempoError(f"dimension {name!r} is declared twice", user_site())
            self.dim_order.append(step)
            out.append((step, bound))
        return tuple(out)

    def offset(self, step: Expr) -> int:
        """How many steps of ``step``'s dim an earlier run already took (``start``; 0 by default)."""
        return self.start.get(step.name, 0)

    def order(self, steps) -> tuple[Expr, ...]:
        """``steps`` in the context's dimension order; unknown symbols are an error."""
        steps = set(steps)
        unknown = [s for s in steps if s not in self.dim_order]
        if unknown:
            names = ", ".join(sorted(s.name for s in unknown))
            raise DomainError(f"symbol {names} is not a dimension of this context", user_site())
        return tuple(d for d in self.dim_order if d in steps)

    def run(self, bounds: dict, fetch: Sequence = (), backend: str | None = None, passes: dict | None = None,
            stores: str = "auto", memory: dict | None = None, config: Config | None = None) -> list:
        """Compile the program and execute it; returns one NumPy array per fetched RT.

        Each array is shaped ``(*bounds of the RT's dims, *spatial shape)``;
        points where a conditional RT is undefined hold NaN (floats) or 0.
        ``stores="point"`` keeps every tensor in a point store instead of the
        store its reads call for (``"auto"``). ``backend``: ``"numpy"``, ``"torch"``
        or ``"jax"``, with an optional device (``"torch:cuda"``); None is
        the config's backend, else ``"numpy"``. ``memory``: memory-planning options,
        ``{"deallocate": False}`` keeps every tensor until its iteration ends,
        ``{"device_budget": "2GB"}`` holds the device tier to a budget
        (``docs/memory.md``). ``config``: the compiler's :class:`tempo.config.Config`
        (None: the one the environment variables say).
        """
        from tempo.api.compile import compile_program

        program = compile_program(self, list(fetch), backend=backend, site=user_site(), passes=passes,
                                  bounds=bounds, memory=memory, config=config)
        return program.run(bounds, stores=stores)

    def compile(self, fetch: Sequence = (), backend=None, passes: dict | None = None,
                memory: dict | None = None, config: Config | None = None):
        """Compile without running: the returned program has ``.sdg``, ``.ast``, ``.plan`` and
        ``.run(bounds)``; the options are :meth:`run`'s, and ``backend`` may also be a backend object
        built with its own options (``NumPyBackend(row_programs=True)``)."""
        from tempo.api.compile import compile_program

        return compile_program(self, list(fetch), backend=backend, site=user_site(), passes=passes, memory=memory,
                               config=config)
