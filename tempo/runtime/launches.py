"""A device loop's launches as the generated code makes them (:mod:`tempo.runtime.device_loops`).

The generated code (:mod:`tempo.runtime.codegen`) writes a device loop's
launch as it writes a kernel's: for each :class:`Launch` of the loop's
:class:`Launches` it reads the stores at the indices the launch lists
(:func:`held`: gathered rows of one block as one slice, read row by row
where they are not one view), calls the loop with the values read, which
turns them into the compiled loop's inputs (:func:`resolve`) and runs it,
writes the rows back (a block's rows in one write where they lie in one
block) and frees the launch's points. Where a launch finds what the
compiled loop cannot do, nothing is written and the generated code runs the
loop statement by statement instead.
"""
from __future__ import annotations

from tempo.errors import TempoError


class Launches:
    """The launches of one call of a device loop, each made as the generated code reaches it;
    ``ran``: whether the device ran the whole loop (else the generated code runs it statement by
    statement, nothing having been written)."""

    def __init__(self, loop, env: dict):
        self.loop, self.env, self.ran = loop, env, False

    def __iter__(self):
        return self.loop._launches(self.env, self)


class Launch:
    """One launch of a device loop: what the host worked out before it, what it reads (``reads[k]``:
    the indices of the loop's ``k``-th store it reads, ``DeviceLoop.reads``), and, once the
    loop ran it, where it writes its rows back (:meth:`block`, :meth:`each`) and what it frees
    (:attr:`frees`, per store of ``DeviceLoop.freed``)."""

    def __init__(self, loop, key: tuple, envs: list[dict], runs: list, inputs: tuple,
                 reads: list[list], seconds: float, ending: bool, first: bool):
        self.loop, self.key, self.envs, self.runs, self.inputs, self.reads, self.seconds, self.ending = \
            loop, key, envs, runs, inputs, reads, seconds, ending
        self.first = first  # the first launch of the loop's call: where it cannot run, the host runs the loop
        self.again: set[int] = set()  # the gathered inputs to read row by row in its next try
        self.ran, self.ended, self.ring, self.kept, self.holding = False, False, None, [], []
        self.started, self.compiled = 0.0, 0.0

    def block(self, k: int) -> tuple | None:
        """``(outer, start)`` where the rows of the ``k``-th tensor written back go in one write of
        its block store, else None."""
        return self.loop._block(self.loop.plan.written_back[k], self.envs, self.runs)

    def each(self, k: int, values) -> list[tuple]:
        """The (point, row) pairs of ``values``, the rows of the ``k``-th tensor written back."""
        return self.loop._each(self.loop.plan.written_back[k], self.envs, self.runs, values)

    @property
    def frees(self) -> list[list]:
        """Per store of ``DeviceLoop.freed``, the points the launch frees."""
        out = self.loop._frees(self.envs, {})
        return [out.get(key, []) for key in self.loop.freed]


class Reads:
    """What one launch reads from stores, asked for as its inputs are prepared: ``indices[k]``, the
    indices of the store ``k`` of ``order`` (tensor -> position); ``unsliced``: the gathered inputs
    read row by row."""

    def __init__(self, order: dict, unsliced: set):
        self.order, self.unsliced = order, unsliced
        self.indices: list[list] = [[] for _ in order]

    def slot(self, key: tuple, index: tuple, optional: bool = False) -> Slot:
        """The value of tensor ``key`` at ``index`` once read (``optional``: None where its store
        holds none, else an error)."""
        k = self.order[key]
        self.indices[k].append(index)
        return Slot(k, len(self.indices[k]) - 1, optional, key, index)


class Slot:
    """A value read for a launch: the ``at``-th read of its ``store``-th store."""

    __slots__ = ("store", "at", "optional", "key", "index")

    def __init__(self, store: int, at: int, optional: bool, key: tuple, index: tuple):
        self.store, self.at, self.optional, self.key, self.index = store, at, optional, key, index


class Later:
    """A value computed from read values once they are read: ``fn`` of ``args`` resolved."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


class Unsliced(Exception):
    """A gathered input's rows are not one view of a block: read them row by row (its ``id``)."""


def held(store, indices: list) -> list:
    """The values of ``store`` at each of ``indices``, None where it holds none (a device loop's reads:
    its inputs, its gathered rows, the carry a previous launch wrote back)."""
    values = []
    for index in indices:
        try:
            values.append(store.read(index))
        except TempoError:
            values.append(None)
    return values


def resolve(tree, values: list[list]):
    """``tree`` (dicts, tuples and lists of arrays, :class:`Slot` and :class:`Later`) with its slots
    the values read."""
    if isinstance(tree, Slot):
        value = values[tree.store][tree.at]
        if value is None and not tree.optional:
            raise TempoError(f"internal error: tensor {tree.key} read at {tree.index} before it was computed")
        return value
    if isinstance(tree, Later):
        return tree.fn(*(resolve(a, values) for a in tree.args))
    if isinstance(tree, dict):
        return {k: resolve(v, values) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(resolve(v, values) for v in tree)
    return tree


def one_view(src: int, value):
    if value is None:
        raise Unsliced({src})
    return value



def nbytes(values) -> int:
    """The bytes of the arrays in ``values`` (dicts, tuples and lists of them)."""
    if isinstance(values, dict):
        return sum(nbytes(v) for v in values.values())
    if isinstance(values, (tuple, list)):
        return sum(nbytes(v) for v in values)
    return int(getattr(values, "nbytes", 0))


def first_rows(values, count: int):
    """The first ``count`` rows of ``values`` (an array, or a tuple of them: a sink's kept inputs)."""
    if isinstance(values, tuple):
        return tuple(first_rows(v, count) for v in values)
    return values if values.shape[0] == count else values[:count]
