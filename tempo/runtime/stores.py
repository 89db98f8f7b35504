"""Tensor stores: where the points of a recurrent tensor live at run time (TEMPO §6).

Every store is written one point at a time and read by an index tuple of ints
and step-1 slices (an evaluated dependence expression); a slice adds a leading
axis to the value read, in index order. Three stores share that interface:

- :class:`PointStore` maps each point to its tensor; slice reads stack.
- :class:`BlockStore` pre-allocates one buffer per block of the innermost
  temporal dim (a block is the whole dim, or ``K`` rows for reads of aligned
  blocks ``(t//K)*K:(t//K)*K+K``); writes go into the buffer in place and slice
  reads within a block are views. Along a dim that ends at run time
  (``tpo.end_when``) a block's buffer starts with a few rows (as many as the last block grew to)
  and doubles. Its rows may lie in memory at another axis
  than the first (where its readers permute them, so that the permuted read is
  contiguous); the values read are the same.
- :class:`WindowStore` keeps the last ``W`` points of the innermost dim in a
  circular buffer of ``2W`` rows; each point is written at row ``t % W`` and
  its mirror ``t % W + W``, so every window of up to ``W`` recent points is one
  contiguous view, and memory does not grow with the dim's bound.

Each store frees what no later read needs with :meth:`free_below` (a point
store also one point, :meth:`PointStore.free_point`, where the schedule
deallocates it after its last reader), lists what it holds with
:meth:`items`, and reports what it allocates and frees to a
:class:`tempo.runtime.memory.Ledger`.

Point and block stores also run the schedule's swap statements
(:mod:`tempo.plan.swap`): ``evict(index)`` moves the points of an index
(points or slices, as a read takes) to the host tier and ``load(index)``
copies them back to the device, keeping the host copy. A point written is
on the device; evicting it copies it to the host the first time and only
drops the device copy after a load. Reading a point that is on the host
alone is an internal error: the check that every read of a swapped tensor
follows a load. A block store that swaps keeps its buffers in the host tier
(TEMPO's pre-allocated host buffer per swapped tensor) and counts on the
device the rows written or loaded and not yet evicted.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tempo.errors import TempoError
from tempo.runtime.memory import Ledger, owned_nbytes


class PointStore:
    """A dict from point to tensor; slice reads stack."""

    kind = "point"

    def __init__(self, name: str, backend, dtype: str, empty_shape, ledger: Ledger | None = None):
        self.name, self.backend, self.dtype = name, backend, dtype
        self.empty_shape = empty_shape  # () -> spatial shape, for reads of empty slices
        self.data: dict[tuple, object] = {}
        self.on_host: dict[tuple, bool] = {}  # evicted point -> whether a load put it back on the device
        self.ledger = ledger or Ledger()
        self.array_dtype = _numpy_dtype(dtype)  # an ndarray of it is stored as it is

    def write(self, point: tuple, value) -> None:
        """Store ``value`` (cast to the store's dtype) at ``point``."""
        data = self.data
        if point in data:
            self.free_point(point)
        if type(value) is np.ndarray and value.dtype is self.array_dtype:  # the common case, without calls
            data[point] = value
            if value.base is None:  # a view counts nothing: its owner counts it
                self.ledger.hold(self.name, value, value.nbytes)
            return
        value = data[point] = self.backend.cast(value, self.dtype)
        nbytes = owned_nbytes(self.backend, value)
        if nbytes:
            self.ledger.hold(self.name, value, nbytes)

    def evict(self, index: tuple) -> None:
        """Move the points of ``index`` held on the device to the host tier (copied the first time)."""
        self.read = self._read_resident  # from now on every read checks that its points are loaded
        for point in _points(index):
            value = self.data.get(point)
            loaded = self.on_host.get(point)
            if value is None or loaded is False:
                continue
            nbytes = owned_nbytes(self.backend, value)
            self.ledger.drop(value)
            if loaded is None:
                self.ledger.add(self.name, nbytes, "host")
                self.ledger.evicted += nbytes
            self.on_host[point] = False

    def load(self, index: tuple) -> None:
        """Copy the points of ``index`` that are on the host alone back to the device."""
        for point in _points(index):
            if self.on_host.get(point) is False:
                nbytes = owned_nbytes(self.backend, self.data[point])
                self.ledger.hold(self.name, self.data[point], nbytes)
                self.ledger.loaded += nbytes
                self.on_host[point] = True

    def _read_resident(self, index: tuple):
        for point in _points(index):
            if self.on_host.get(point) is False:
                raise _evicted(self.name, point)
        return PointStore.read(self, index)

    def read(self, index: tuple):
        """The tensor at a point, or the points of a slice stacked along leading axes."""
        try:
            return self.data[index]
        except (KeyError, TypeError):  # not held, or a slice (unhashable)
            pass
        if not any(isinstance(i, slice) for i in index):
            return self._get(index)
        if len(index) == 1:
            points = [self._get((k,)) for k in range(index[0].start, index[0].stop)]
            if points:
                return self.backend.stack(points, (len(points),), self.dtype)
        ranges = [range(i.start, i.stop) if isinstance(i, slice) else (i,) for i in index]
        sizes = tuple(max(0, i.stop - i.start) for i in index if isinstance(i, slice))
        points = [self._get(p) for p in itertools.product(*ranges)]
        if not points:
            return self.backend.stack([], sizes + tuple(self.empty_shape()), self.dtype)
        return self.backend.stack(points, sizes, self.dtype)

    def free_below(self, axis: int, live) -> None:
        """Drop every point whose coordinate along ``axis`` is below ``live``."""
        if self.on_host:
            for point in [p for p in self.data if p[axis] < live]:
                self.free_point(point)
        else:  # nothing evicted: free_point's work without its call
            self.ledger.drop_each(_popped_below(self.data, axis, live))

    def free_point(self, point: tuple) -> None:
        """Drop the tensor at ``point`` (no later statement reads it)."""
        value = self.data.pop(point, None)
        if value is None:
            return
        loaded = self.on_host.pop(point, None) if self.on_host else None  # None: never evicted
        if loaded is not False:
            self.ledger.drop(value)
        if loaded is not None:
            self.ledger.add(self.name, -owned_nbytes(self.backend, value), "host")

    def items(self):
        """The (point, tensor) pairs held."""
        return iter(self.data.items())

    def nbytes(self) -> int:
        return sum(self.backend.nbytes(v) for v in self.data.values())

    def _get(self, point: tuple):
        try:
            return self.data[point]
        except KeyError:
            raise TempoError(f"internal error: {self.name} read at {point} before it was computed") from None


def free_below(stores: tuple, axis: int, live) -> None:
    """``store.free_below(axis, live)`` for each of ``stores`` (the generated code's one call after an
    iteration of the main loop for the stores freed below the same floor): the tensors of point
    stores that hold nothing evicted are popped here and dropped from their ledger in one call,
    before any other store frees (the ledger sees the frees in the stores' order); a block store
    that holds nothing is passed over without its call."""
    dead, ledger = [], None
    for store in stores:
        cls = store.__class__
        if cls is PointStore:
            data = store.data
            if not data:
                continue
            if not store.on_host:
                if store.ledger is not ledger:
                    if dead:
                        ledger.drop_each(dead)
                        dead = []
                    ledger = store.ledger
                if len(data) == 1:  # _popped_below's work without its call; its common case without a list
                    for point in data:
                        if point[axis] < live:
                            dead.append(data.pop(point))
                        break
                else:
                    for point in [p for p in data if p[axis] < live]:
                        dead.append(data.pop(point))
                continue
        elif cls is BlockStore and not store.blocks:
            continue
        if dead:
            ledger.drop_each(dead)
            dead = []
        store.free_below(axis, live)
    if dead:
        ledger.drop_each(dead)


def _popped_below(data: dict, axis: int, live) -> list:
    """The tensors of ``data`` whose point's coordinate along ``axis`` is below ``live``, popped
    from it in its order."""
    if len(data) == 1:  # the common case (a tensor over the main loop's dim): no list of points
        for point in data:
            return [data.pop(point)] if point[axis] < live else []
    return [data.pop(p) for p in [p for p in data if p[axis] < live]]


class _BufferStore:
    """Shared by block and window stores: buffers of rows along the innermost dim,
    one set per point of the outer dims; reads that slice outer dims stack views."""

    tier = "device"  # "host": a swap plan's; its buffers are in the host tier (see the module docstring)
    axis = 0  # where the rows lie in memory among a row's axes (Backend.empty_rows)

    def __init__(self, name: str, backend, dtype: str, row_shape: tuple, ledger: Ledger | None = None):
        self.name, self.backend, self.dtype, self.row_shape = name, backend, dtype, tuple(row_shape)
        self.ledger = ledger or Ledger()
        self.row_nbytes = math.prod(self.row_shape) * np.dtype(dtype).itemsize
        self._write_into, self._view = backend.write_into, backend.view  # bound once: called per row

    def _allocate(self, rows: int):
        buffer = self.backend.empty_rows(rows, self.row_shape, self.dtype, self.axis)
        self.ledger.add(self.name, self.backend.nbytes(buffer), self.tier)
        return buffer

    def _release(self, buffer) -> None:
        self.ledger.add(self.name, -self.backend.nbytes(buffer), self.tier)

    def read(self, index: tuple):
        """A row (point read) or a view of rows (slice of the innermost dim)."""
        return self._gather(index)

    def evict(self, index: tuple) -> None:
        raise TempoError(f"internal error: {self.name} is a {self.kind} store, which a swap plan does not move")

    load = evict

    def _gather(self, index: tuple):
        outer, last = index[:-1], index[-1]
        for i in outer:
            if type(i) is slice:
                break
        else:
            return self._read(outer, last)
        ranges = [range(i.start, i.stop) if isinstance(i, slice) else (i,) for i in outer]
        sizes = tuple(max(0, i.stop - i.start) for i in outer if isinstance(i, slice))
        parts = [self._read(p, last) for p in itertools.product(*ranges)]
        if parts:
            return self.backend.stack(parts, sizes, self.dtype)
        rows = (max(0, last.stop - last.start),) if isinstance(last, slice) else ()
        return self.backend.stack([], sizes + rows + self.row_shape, self.dtype)

    def _empty(self):
        return self.backend.stack([], (0,) + self.row_shape, self.dtype)

    def _check_shape(self, point: tuple, value) -> None:
        shape = getattr(value, "shape", ())
        if shape != self.row_shape:
            shape = tuple(shape)
            raise TempoError(f"internal error: {self.name} computed a value of shape {shape} at {point}, "
                             f"but its {self.kind} store holds rows of shape {self.row_shape}")

    def _unwritten(self, point) -> TempoError:
        return TempoError(f"internal error: {self.name} read at {point} before it was computed")


class BlockStore(_BufferStore):
    """Pre-allocated buffers of ``length`` rows along the innermost dim, one per block
    (``t // length``) of each outer point; slice reads within a block are views.
    ``axis``: where the rows lie in memory among a row's axes (0: row after row)."""

    kind = "block"

    def __init__(self, name: str, backend, dtype: str, row_shape: tuple, length: int, ledger: Ledger | None = None,
                 axis: int = 0, grows: bool = False):
        super().__init__(name, backend, dtype, row_shape, ledger)
        self.length, self.axis = max(1, length), axis
        self.first_rows = min(self.length, GROWN_FROM) if grows else self.length  # rows a new block's buffer starts with
        self.rows: dict[tuple, int] = {}  # block key -> rows its buffer holds (up to ``length``, doubling)
        self.blocks: dict[tuple, object] = {}  # outer point + (block number,) -> buffer
        self.written: dict[tuple, bytearray] = {}  # same keys -> 1 per row written
        self.where: dict[tuple, bytearray] = {}  # same keys, in the host tier -> per row: ON_HOST, ON_DEVICE, LOADED
        self.hot: tuple | None = None  # the last block written, a NumPy buffer on the device (see write)

    def write(self, point: tuple, value) -> None:
        """Write ``value`` into its row of the block's buffer, in place.

        A NumPy buffer on the device is written directly while writes stay in the rows its
        last write's block holds (``hot``: outer point, first row, rows held, buffer, rows
        written), without the key, the dict lookups and the backend's call of other writes."""
        hot = self.hot
        if hot is not None and point[:-1] == hot[0] and getattr(value, "shape", ()) == self.row_shape:
            row = point[-1] - hot[1]
            if 0 <= row < hot[2]:
                hot[3][row] = value
                hot[4][row] = 1
                return
        if getattr(value, "shape", ()) != self.row_shape:
            self._check_shape(point, value)
        block, row = divmod(point[-1], self.length)
        key = point[:-1] + (block,)
        written = self.written.get(key)
        if written is None or row >= self.rows[key]:
            self._block(key, row + 1)
            written = self.written[key]
        buffer = self.blocks[key] = self._write_into(self.blocks[key], row, value)
        written[row] = 1
        if self.tier == "host":
            self._on_device(key, row, row + 1)
        elif type(buffer) is np.ndarray:
            self.hot = (point[:-1], block * self.length, self.rows[key], buffer, written)

    def write_rows(self, outer: tuple, start: int, values) -> None:
        """Write ``values``, rows along a leading axis, at points ``outer + (start + k,)`` in one write
        (they must lie in one block)."""
        count = values.shape[0]
        block, row = divmod(start, self.length)
        if row + count > self.length or tuple(values.shape[1:]) != self.row_shape:
            raise TempoError(f"internal error: {self.name} written rows {start}:{start + count} of shape "
                             f"{tuple(values.shape[1:])} across blocks of {self.length} rows {self.row_shape}")
        key = outer + (block,)
        self.blocks[key] = self.backend.write_into(self._block(key, row + count), slice(row, row + count), values)
        self.written[key][row:row + count] = b"\x01" * count
        if self.tier == "host":
            self._on_device(key, row, row + count)

    def _on_device(self, key: tuple, start: int, stop: int) -> None:
        """Rows ``start:stop`` of block ``key`` just written: on the device until evicted."""
        where = self.where[key]
        fresh = where[start:stop].count(ON_HOST)
        where[start:stop] = bytes([ON_DEVICE]) * (stop - start)
        self.ledger.add(self.name, fresh * self.row_nbytes)

    def evict(self, index: tuple) -> None:
        """Move the rows of ``index`` on the device to the host tier (copied unless a load put them there)."""
        for key, start, stop in self._spans(index):
            where = self.where[key]
            part = where[start:stop]
            held = stop - start - part.count(ON_HOST)
            if held:
                self.ledger.evicted += part.count(ON_DEVICE) * self.row_nbytes
                where[start:stop] = bytes(stop - start)
                self.ledger.add(self.name, -held * self.row_nbytes)

    def load(self, index: tuple) -> None:
        """Copy the written rows of ``index`` that are on the host alone back to the device."""
        for key, start, stop in self._spans(index):
            where, written = self.where[key], self.written[key]
            count = 0
            for row in range(start, stop):
                if written[row] and where[row] == ON_HOST:
                    where[row] = LOADED
                    count += 1
            if count:
                self.ledger.add(self.name, count * self.row_nbytes)
                self.ledger.loaded += count * self.row_nbytes

    def read(self, index: tuple):
        """A row or a view of rows; of a swapped tensor, only rows on the device."""
        last = index[-1]
        hot = self.hot
        if hot is not None and last.__class__ is int and index[:-1] == hot[0]:  # a row of the last block written
            row = last - hot[1]
            if 0 <= row < hot[2] and hot[4][row]:
                return hot[3][row]
        if last.__class__ is int and self.tier == "device":  # a point (the common read): its row, directly
            outer = index[:-1]
            for i in outer:
                if i.__class__ is slice:
                    return self._gather(index)
            block, row = divmod(last, self.length)
            key = outer + (block,)
            written = self.written.get(key)
            if written is None or not written[row]:
                raise self._unwritten(index)
            return self._view(self.blocks[key], row)
        value = self._gather(index)
        if self.tier == "host":
            for key, start, stop in self._spans(index):
                found = self.where[key].find(ON_HOST, start, stop)
                if found != -1:
                    raise _evicted(self.name, key[:-1] + (key[-1] * self.length + found,))
        return value

    def _spans(self, index: tuple):
        """``(block key, first row, row after the last)`` of every allocated block ``index`` covers."""
        *outer, last = index
        ranges = [range(i.start, i.stop) if isinstance(i, slice) else (i,) for i in outer]
        start, stop = (last.start, last.stop) if isinstance(last, slice) else (last, last + 1)
        for point in itertools.product(*ranges):
            for block in range(start // self.length, (stop - 1) // self.length + 1 if stop > start else 0):
                key = point + (block,)
                if key in self.blocks:
                    first = block * self.length
                    yield key, max(start - first, 0), min(stop - first, self.length)

    def _block(self, key: tuple, rows: int):
        """The buffer of block ``key`` holding at least ``rows`` rows: allocated at its first write
        with ``first_rows`` rows (the whole block, unless its dim ends at run time: the rows the
        store's last grown buffer reached, :data:`GROWN_FROM` at first), then doubled, its rows
        copied, until it holds them (at most ``length``)."""
        buffer = self.blocks.get(key)
        if buffer is None:
            buffer = self.blocks[key] = self._allocate(self.first_rows)
            self.rows[key] = self.first_rows
            self.written[key] = bytearray(self.length)
            if self.tier == "host":
                self.where[key] = bytearray(self.length)
        held = self.rows[key]
        if rows > held:
            self.hot = None
            while held < rows:
                held = min(2 * held, self.length)
            self.first_rows = held  # the next block starts as large as this one grew (lengths run alike)
            grown = self._allocate(held)
            filled = self.written[key].rfind(1) + 1
            if filled:
                grown = self.backend.write_into(grown, slice(0, filled),
                                                self.backend.view(buffer, slice(0, filled)))
            self._release(buffer)
            buffer = self.blocks[key] = grown
            self.rows[key] = held
        return buffer

    def _read(self, outer: tuple, last):
        if isinstance(last, slice):
            start, stop = last.start, last.stop
            if stop <= start:
                return self._empty()
            block = start // self.length
            if (stop - 1) // self.length != block:
                raise TempoError(f"internal error: {self.name} read {start}:{stop} across blocks of "
                                 f"{self.length} rows")
            first = block * self.length
            key = outer + (block,)
            written = self.written.get(key)
            if written is None or written.find(0, start - first, stop - first) != -1:
                raise self._unwritten(outer + (last,))
            return self.backend.view(self.blocks[key], slice(start - first, stop - first))
        block, row = divmod(last, self.length)
        key = outer + (block,)
        written = self.written.get(key)
        if written is None or not written[row]:
            raise self._unwritten(outer + (last,))
        return self.backend.view(self.blocks[key], row)

    def free_below(self, axis: int, live) -> None:
        """Drop the blocks whose points along ``axis`` all lie below ``live``."""
        if not self.blocks:  # the common case after each update of a learner: nothing held
            return
        for key in [key for key in self.blocks
                    if (key[axis] < live if axis < len(key) - 1 else (key[-1] + 1) * self.length <= live)]:
            self._drop(key)

    def free_rows(self, index: tuple) -> None:
        """Drop the blocks whose first row lies in ``index``'s rows (a tile read last: its block)."""
        *outer, last = index
        for block in range(-(-last.start // self.length), -(-last.stop // self.length)):
            if tuple(outer) + (block,) in self.blocks:
                self._drop(tuple(outer) + (block,))

    def _drop(self, key: tuple) -> None:
        self.hot = None
        self._release(self.blocks.pop(key))
        del self.rows[key]
        del self.written[key]
        where = self.where.pop(key, None)
        if where is not None:
            self.ledger.add(self.name, -(self.length - where.count(ON_HOST)) * self.row_nbytes)

    def items(self):
        """The (point, row view) pairs written."""
        for key, buffer in self.blocks.items():
            first = key[-1] * self.length
            for row, done in enumerate(self.written[key]):
                if done:
                    yield key[:-1] + (first + row,), self.backend.view(buffer, row)

    def nbytes(self) -> int:
        return sum(self.backend.nbytes(b) for b in self.blocks.values())


class WindowStore(_BufferStore):
    """The last ``capacity`` points of the innermost dim, per outer point, in a circular
    buffer of twice that many rows with mirrored writes: any window of up to
    ``capacity`` recent points is one contiguous view. Points must be written in
    increasing order; a read of a point already overwritten is an internal error."""

    kind = "window"

    def __init__(self, name: str, backend, dtype: str, row_shape: tuple, capacity: int, ledger: Ledger | None = None):
        super().__init__(name, backend, dtype, row_shape, ledger)
        self.capacity = max(1, capacity)
        self.buffers: dict[tuple, object] = {}  # outer point -> buffer of 2 * capacity rows
        self.tags: dict[tuple, list[int]] = {}  # outer point -> the point each slot holds (-1: none)
        self.latest: dict[tuple, int] = {}  # outer point -> the last point written

    def write(self, point: tuple, value) -> None:
        """Write ``value`` at slot ``t % capacity`` and its mirror, in place."""
        self._check_shape(point, value)
        outer, t = point[:-1], point[-1]
        buffer = self.buffers.get(outer)
        if buffer is None:
            buffer = self.buffers[outer] = self._allocate(2 * self.capacity)
            self.tags[outer], self.latest[outer] = [-1] * self.capacity, -1
        if t <= self.latest[outer]:
            raise TempoError(f"internal error: {self.name} written at {point} after its point "
                             f"{self.latest[outer]}; a window store needs increasing writes")
        slot = t % self.capacity
        buffer = self.backend.write_into(buffer, slot, value)
        self.buffers[outer] = self.backend.write_into(buffer, slot + self.capacity, value)
        self.tags[outer][slot], self.latest[outer] = t, t

    def _read(self, outer: tuple, last):
        tags, capacity = self.tags.get(outer), self.capacity
        if isinstance(last, slice):
            start, stop = last.start, last.stop
            if stop <= start:
                return self._empty()
            if (stop - start > capacity or tags is None or tags[start % capacity] != start
                    or tags[(stop - 1) % capacity] != stop - 1):
                raise self._overwritten(outer + (last,))
            slot = start % capacity
            return self.backend.view(self.buffers[outer], slice(slot, slot + stop - start))
        if tags is None or tags[last % capacity] != last:
            raise self._overwritten(outer + (last,))
        return self.backend.view(self.buffers[outer], last % capacity)

    def _overwritten(self, point) -> TempoError:
        return TempoError(f"internal error: {self.name} read at {point}, which its window store of "
                          f"{self.capacity} points does not hold (not yet computed, or overwritten)")

    def free_below(self, axis: int, live) -> None:
        """Drop the buffers of outer points below ``live`` (or, along the innermost
        dim, whose every point held lies below ``live``)."""
        dead = [outer for outer, latest in self.latest.items()
                if (outer[axis] < live if axis < len(outer) else latest < live)]
        for outer in dead:
            self._release(self.buffers.pop(outer))
            del self.tags[outer], self.latest[outer]

    def items(self):
        """The (point, row view) pairs held, oldest first."""
        for outer, buffer in self.buffers.items():
            for t, slot in sorted((t, slot) for slot, t in enumerate(self.tags[outer]) if t >= 0):
                yield outer + (t,), self.backend.view(buffer, slot)

    def nbytes(self) -> int:
        return sum(self.backend.nbytes(b) for b in self.buffers.values())


GROWN_FROM = 16  # rows a growing block's buffer starts with
ON_HOST, ON_DEVICE, LOADED = 0, 1, 2  # where a swapped block's row is: host alone, device alone, both


def _numpy_dtype(name: str) -> np.dtype | None:
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _points(index: tuple):
    """The points of an index of points and slices."""
    return itertools.product(*(range(i.start, i.stop) if isinstance(i, slice) else (i,) for i in index))


def _evicted(name: str, point: tuple) -> TempoError:
    return TempoError(f"internal error: {name} read at {point}, which is evicted to the host "
                      f"(no load of it before this read)")


def make_store(choice, name: str, backend, dtype: str, shape, bound: int | None, ledger: Ledger | None = None,
               grows: bool = False):
    """The store ``choice`` (a :class:`tempo.plan.store_choice.StoreChoice`) names.

    ``shape``: a function returning the spatial shape; ``bound``: the innermost
    dim's bound (the rows of a block when the choice leaves it open, and at most);
    ``ledger``: where it reports the bytes it holds; ``grows``: the innermost dim
    ends at run time (``tpo.end_when``), so a block's buffer starts small and doubles.
    """
    if choice.kind == "block":
        return BlockStore(name, backend, dtype, shape(), min(choice.size or bound, bound), ledger, choice.axis, grows)
    if choice.kind == "window":
        return WindowStore(name, backend, dtype, shape(), choice.size, ledger)
    return PointStore(name, backend, dtype, shape, ledger)

