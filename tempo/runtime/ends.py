"""The run-time side of ``tpo.end_when``: where each loop over a dim that ends at run time exits.

The generated source (:mod:`tempo.runtime.codegen`) calls an :class:`EndCheck`
``U<n>`` (as ``E<n>``, its :meth:`~EndCheck.stepper`) at each step of the loop
over the dim ``t`` with the flag's value there; it answers the bound ``T`` the loop goes on with: the cap the run gives
``T`` until the flag is known to hold, then the step after the first step where
it holds. The flag is read on the host every ``k`` steps (speculative checking):
the steps run past the end meanwhile wrote points no read of ``0:T`` sees, and
draw random numbers by their point (:mod:`tempo.runtime.counter_rng`), so the
results are the same for every ``k``. A loop that runs host code besides the
check (an environment, a sink) reads the flag at every step, since host code
run past the end could not be taken back.

``k`` (``every``) is given (``Config(end_check_every=k)``) or chosen: 1 on a
host backend, whose flags are on the host already; on a device, from
measurements: the seconds a read of the flag on the host takes (``latency``)
against the seconds a step takes, for the loop's last length ``L``: reading
every ``k`` steps costs ``L / k`` reads and about ``(k - 1) / 2`` steps run
past the end, least at ``k = sqrt(2 L latency / step)`` (:func:`every_for`).

A loop over the dim that runs on the device as a whole
(:mod:`tempo.runtime.device_loops`) reads its flags once per launch of
:meth:`EndCheck.chunk` steps and records where it ended with
:meth:`EndCheck.ended`. There a step after the end is skipped on the device
rather than run, so a longer chunk costs little besides the rows the host
prepares for it, and ``k`` is the compiled scan's length, so that another
``k`` is another compile: ``k`` is the given one, else the most steps of a
chunk, :data:`MAX_EVERY` (or the cap, where less), not chosen from
measurements.
"""
from __future__ import annotations

import itertools
import math
import time

import numpy as np

from tempo.errors import TempoError
from tempo.ir.sdg import SDG

MAX_EVERY = 64  # the most steps an automatically chosen k runs between reads of the flag


class EndCheck:
    """The exits of the loops over one dim that ends at run time (see the module docstring).

    ``every``: steps between reads of the flag on the host (None: chosen from measurements);
    ``host_steps``: whether the loop runs other host code, so that it reads the flag every step.
    """

    def __init__(self, sdg: SDG, node: int, backend, every: int | None, host_steps: bool):
        self.sdg, self.node, self.backend = sdg, node, backend
        self.configured = every  # Config(end_check_every): the steps of a device loop's chunk too
        self.given = 1 if host_steps or (every is None and backend.device_kind == "cpu") else every
        self.every = self.given or 1
        self.dtype = sdg.nodes[sdg.in_edges(node)[0].src].dtypes[sdg.in_edges(node)[0].src_out]
        self.lengths: dict[tuple, int] = {}  # outer point -> the dim's length there
        self.pending: list = []  # flags not yet read on the host
        self.steps = 0  # steps the loops ran, those past the end included
        self.reads = 0  # reads of flags on the host
        self.latency = 0.0  # seconds of the last read
        self.step_seconds = 0.0  # seconds per step, measured over the last loop
        self.started = None  # perf_counter() at the loop's first step

    def stepper(self):
        """What the generated code calls at each step of the loop (``E<n>``, as :meth:`__call__`): where
        the flag is read at every step, a plain function that only reads it (a NumPy store's flag of
        one element, ``np.bool_``, as it is), else this check."""
        if self.given != 1:
            return self
        lengths, to_numpy, one = self.lengths, self.backend.to_numpy, np.bool_

        def step(flag, t: int, bound: int, outer: tuple) -> int:
            self.steps += 1
            self.reads += 1
            if flag.__class__ is not one:
                flag = to_numpy(flag) if type(flag) is not np.ndarray else flag
                flag = flag.item() if flag.size == 1 else flag.all()
            if flag or t + 1 >= bound:
                lengths[outer] = t + 1
                return t + 1
            return bound

        return step

    def __call__(self, flag, t: int, bound: int, outer: tuple) -> int:
        """The bound the loop over the dim goes on with after step ``t`` (``flag``: its value there),
        the flag read every ``every`` steps."""
        self.steps += 1
        if t == 0:
            self.started = time.perf_counter()
        self.pending.append(self.backend.detach(flag, [flag]) if self.every > 1 else flag)
        if len(self.pending) < self.every and t + 1 < bound:
            return bound
        held = self._read()
        first = t + 1 - len(held)
        ends = np.flatnonzero(held)
        end = first + int(ends[0]) + 1 if ends.size else bound if t + 1 >= bound else None
        if end is None:
            return bound
        self.lengths[outer] = end
        self._choose(t + 1, end)
        return end

    def chunk(self) -> int:
        """The steps of each launch of a device loop over the dim (fewer where the loop is shorter)."""
        return self.configured or MAX_EVERY

    def ended(self, outer: tuple, length: int, steps: int, reads: int, every: int) -> None:
        """A device loop over the dim at the outer point ``outer`` ended at ``length``: ``steps`` run on
        the device, ``reads`` of its flags on the host, one per chunk of ``every`` steps."""
        self.lengths[outer] = length
        self.steps += steps
        self.reads += reads
        self.every = every

    def _read(self) -> np.ndarray:
        """Whether every element of each pending flag holds, read on the host at once."""
        start = time.perf_counter()
        stacked = self.backend.to_numpy(self.backend.stack(self.pending, (len(self.pending),), self.dtype))
        self.latency = time.perf_counter() - start
        self.reads += 1
        self.pending = []
        return stacked.reshape(len(stacked), -1).all(axis=1)

    def _choose(self, ran: int, end: int) -> None:
        """``every`` for the next loop, from this one's ``ran`` steps and its length ``end``."""
        if self.given is not None:
            return
        self.step_seconds = (time.perf_counter() - self.started) / ran
        self.every = every_for(end, self.latency, self.step_seconds)

    def within(self, last: int, outer: tuple, reader: int, src: int) -> None:
        """Raise naming the reader's line where it reads ``src`` at step ``last`` past the dim's end
        at an outer point of ``outer`` (ints and slices) whose length is known."""
        points = itertools.product(*(range(o.start, o.stop) if isinstance(o, slice) else (o,) for o in outer))
        for point in points:
            length = self.lengths.get(point)
            if length is not None and last >= length:
                check = self.sdg.nodes[self.node]
                t, names = check.domain[-1], [d.name for d in check.domain[:-1]]
                where = ", ".join(f"{name}={p}" for name, p in zip(names, point))
                raise TempoError(f"{self.sdg.describe(reader)} reads {self.sdg.describe(src)} at "
                                 f"{t.name}={last}, past the end of {t.name} at {where or 'its only point'}: "
                                 f"{t.name.upper()} = {length} there (tpo.end_when at {check.site})",
                                 self.sdg.nodes[reader].site)


def every_for(length: int, latency: float, step_seconds: float) -> int:
    """Steps between reads of the flag that cost least for a loop of ``length`` steps of
    ``step_seconds`` each, a read taking ``latency`` seconds: ``sqrt(2 length latency / step)``,
    rounded, from 1 to :data:`MAX_EVERY`."""
    best = math.sqrt(2 * length * latency / max(step_seconds, 1e-9))
    return max(1, min(MAX_EVERY, round(best)))
