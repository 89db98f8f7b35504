"""The JAX backend: every fused island, and every other device op, is one ``jax.jit`` function.

An op's kernel is its jnp implementation traced once per *static key* and
input shapes: the static key holds the values of the symbols its symbolic
sizes use (a reshape to ``(T, B, 4)``), read from the run's environment, and
the sizes of its spatial slices; a spatial index's points and slice starts
(``x.spatial[t]``) are arguments. A fused island is one jitted function of
its inputs, so XLA fuses its steps into few loops; its permutations are
left lazy while it is traced (:mod:`tempo.runtime.backends.jax_layout`), so
its steps compute on their operands in the layout they were stored in
rather than on transposed copies; a decoding step's softmax attention
among its steps is one native call on a CPU
(:mod:`tempo.runtime.backends.jax_attention`). What a program computes on
the host stays there: symbol values (``eval_symbol``) and counter-based
random numbers are computed as the NumPy backend computes them (the same
bits) and passed to the jitted function as arguments (a device loop's
body computes the symbol values and uniform numbers itself, the same bits:
:mod:`tempo.runtime.backends.jax_step_values`);
user functions get NumPy arrays.

JAX promotes dtypes differently from NumPy (``int64 + float32`` is float32
in JAX); every step casts its inputs the way NumPy would, at trace time
(the ops' jnp rules are :mod:`tempo.runtime.backends.jax_ops`).
Programs may use float64 and int64 (``eval_symbol`` is int64), so the
backend runs with JAX's 64-bit types on, inside the executor only
(:meth:`JaxBackend.running`), leaving other JAX code in the process as it is.

Block and window stores hold device arrays (:class:`Rows`). Row writes are
deferred: a read of a written row is the value written, and a block written
row by row and then read whole is one stack of its rows. Otherwise the
written rows go into the buffer by donating it to a jitted
``dynamic_update_slice`` (TEMPO §5.2: the store is the buffer's only user),
so XLA updates it in place instead of copying it; a read is a jitted dynamic
slice, so a read value stays valid after the buffer is donated. A read of a
whole block is the buffer itself: every row of a block is written once, so
such a read comes after the block's last write and nothing donates it later.
"""
from __future__ import annotations

import contextlib
import math
import warnings
import weakref
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.runtime.backends import jax_attention, jax_layout, jax_native, jax_staging
from tempo.runtime.backends.jax_ops import IMPLS
from tempo.runtime.backends import numpy as np_backend
from tempo.runtime.backends.base import Backend, Kernel, StepFailed
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import seq

x64 = jax.enable_x64  # a context manager: 64-bit types while it is entered

HOST = (ops.EvalSymbolOp, ops.RandomOp)  # computed on the host by the NumPy kernels
INDEXED = (ops.SpatialIndexOp,)  # traced by the island itself, with its starts as arguments



def _static_exprs(op: ops.Op) -> tuple:
    """The expressions an op's traced implementation evaluates in the environment (sizes, pads)."""
    exprs = {ops.ReshapeOp: lambda: op.shape, ops.ExpandOp: lambda: op.shape,
             ops.SpatialIndexOp: lambda: op.items, ops.PadOp: lambda: (op.before, op.after)}.get(type(op))
    return () if exprs is None else tuple(e for e in exprs() if not isinstance(e, int))


def _static_names(op: ops.Op) -> tuple[str, ...]:
    """The symbols whose values an op's traced implementation reads from the environment."""
    return tuple(sorted({s.name for e in _static_exprs(op) for s in e.free_symbols()}))


_NONE: dict = {}  # no spatial index starts


class Island:
    """Steps run as one ``jax.jit`` function of the island's inputs and of its host values.

    Host steps (symbol values, random numbers) run first, on the host, with
    the NumPy kernels; constants are device arrays passed in (not baked into
    the compiled program). A spatial index's points and slice starts are
    arguments too (``x[t]`` is one compiled function for every ``t``); its
    slice sizes are part of the static key. One jitted function is kept per
    static key. ``donate``: the inputs whose buffers the island may write its
    outputs into (:mod:`tempo.plan.donation`: nothing reads them after it).
    """

    def __init__(self, steps: tuple[ops.FusedStep, ...], outputs: tuple[tuple[int, int], ...], compiled: dict,
                 donate: frozenset = frozenset()):
        for step in steps:
            if type(step.op) not in IMPLS and not isinstance(step.op, (*HOST, *INDEXED, ops.ConstOp)):
                raise TempoError(f"the jax backend has no kernel for {step.op.name}")
        self.steps, self.outputs = steps, outputs
        self.host = [(j, np_backend.KERNELS[type(s.op)](s.op)) for j, s in enumerate(steps)
                     if isinstance(s.op, HOST)]
        self.consts = {j: device_constant(s.op.value.array) for j, s in enumerate(steps)
                       if isinstance(s.op, ops.ConstOp)}
        self.indexes = [(j, compile_expr(seq(*s.op.items))) for j, s in enumerate(steps)
                        if isinstance(s.op, ops.SpatialIndexOp)]
        self.names = tuple(sorted({n for s in steps if not isinstance(s.op, ops.SpatialIndexOp)
                                   for n in _static_names(s.op)}))
        # the static key evaluates the expressions, not the symbols in them: a pad of
        # ``w - min(t + 1, w)`` rows compiles once for every t from w - 1 on
        self.sizes = [compile_expr(e) for s in steps if not isinstance(s.op, ops.SpatialIndexOp)
                      for e in _static_exprs(s.op)]
        self.compiled = compiled  # static key -> jitted function, shared by every run of the program
        self.keyed = bool(self.sizes or self.indexes)  # else one function serves every launch
        self.donate = donate

    def __call__(self, inputs, env, point):
        if self.keyed:
            key, starts = [size(env) for size in self.sizes], {}
            for j, index in self.indexes:
                form, starts[j] = _index_form(index(env))
                key.append(form)
            key = tuple(key)
        else:
            key, starts = (), _NONE
        fn = self.compiled.get(key)
        if fn is None:
            forms = dict(zip([j for j, _ in self.indexes], key[len(self.sizes):]))
            traced = self._traced({n: env[n] for n in self.names}, forms)
            fn = self.compiled[key] = _donating(traced, self.donate) if self.donate else jax.jit(traced)
        given = self.consts
        if self.host:
            given = dict(given)
            for j, kernel in self.host:
                given[j] = kernel([], env, point)[0]
        try:
            return fn(inputs, given, starts)
        except StepFailed:
            raise
        except Exception as err:
            raise StepFailed(self.steps[0].op.name, self.steps[0].site, err) from err

    def _traced(self, env: dict, forms: dict, after: Callable | None = None) -> Callable:
        """The island as a function of its inputs, host values and index starts; ``after(j, results)``
        (a device loop's masks of rows past a dim's end) maps each step's results."""
        steps, outputs = self.steps, self.outputs
        attention = jax_attention.find(steps, outputs) if after is None else {}
        inside = {j for match in attention.values() for j in match.steps[:-1]}  # traced by the chain's line

        def run(inputs, given, starts):
            values = {}

            def trace(j: int, known: dict) -> list:
                step = steps[j]
                if j in given:
                    results = (jnp.asarray(given[j]),)
                else:
                    args = [inputs[k] if i < 0 else known[i][k] for i, k in step.inputs]
                    try:
                        results = ((_index(jax_layout.materialised(args[0]), forms[j], starts[j]),) if j in forms
                                   else jax_layout.run(step.op, args, env, IMPLS[type(step.op)]))
                    except Exception as err:
                        raise StepFailed(step.op.name, step.site, err) from err
                if step.dtypes:
                    results = [v if v.dtype == d else v.astype(d) for v, d in zip(results, step.dtypes)]
                return results

            def replay(match: jax_attention.Attention):
                """The chain's steps traced one after the other: its result."""
                known = dict(values)
                for j in match.steps:
                    known[j] = trace(j, known)
                return known[match.steps[-1]][0]

            for j in range(len(steps)):
                if j in inside:
                    continue
                if j in attention:
                    results = [jax_attention.attend(attention[j], lambda ref: inputs[ref[1]] if ref[0] < 0 else
                                                    values[ref[0]][ref[1]], lambda: replay(attention[j]))]
                else:
                    results = trace(j, values)
                values[j] = results if after is None else after(j, results)
            return tuple(jax_layout.materialised(values[j][k]) for j, k in outputs)

        return run


def _donating(run: Callable, donate: frozenset) -> Callable:
    """``run(inputs, given, starts)`` jitted with the inputs at the positions ``donate`` donated
    (XLA may write outputs into their buffers; where none fits, it keeps them, silently)."""

    def split(donated, kept, given, starts):
        donated, kept = iter(donated), iter(kept)
        return run([next(donated) if k in donate else next(kept) for k in range(count)], given, starts)

    fn, count = jax.jit(split, donate_argnums=0), 0

    def call(inputs, given, starts):
        nonlocal count
        count = len(inputs)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            return fn([x for k, x in enumerate(inputs) if k in donate],
                      [x for k, x in enumerate(inputs) if k not in donate], given, starts)

    return call


def _index_form(index: tuple) -> tuple:
    """A spatial index as ``(form, starts)``: the form goes in the static key, the starts are
    an argument. Points and non-negative step-1 slices are dynamic (``("dynamic", sizes)``,
    None for a point); anything else is static, its values in the form."""
    sizes, starts = [], []
    for i in index:
        if isinstance(i, slice):
            if i.step not in (None, 1) or i.start is None or i.stop is None or not 0 <= i.start <= i.stop:
                break
            sizes.append(i.stop - i.start)
            starts.append(i.start)
        elif isinstance(i, (int, np.integer)) and i >= 0:
            sizes.append(None)
            starts.append(int(i))
        else:
            break
    else:
        return ("dynamic", tuple(sizes)), np.asarray(starts, dtype=np.int64)
    items = tuple((i.start, i.stop, i.step) if isinstance(i, slice) else i for i in index)
    return ("static", items), np.zeros(0, dtype=np.int64)


def _index(x, form: tuple, starts):
    kind, items = form
    if kind == "static":
        return x[tuple(slice(*i) if isinstance(i, tuple) else i for i in items)]
    axis = 0
    for k, size in enumerate(items):
        if size is None:
            x = lax.dynamic_index_in_dim(x, starts[k], axis, keepdims=False)
        else:
            x = lax.dynamic_slice_in_dim(x, starts[k], size, axis)
            axis += 1
    return x


def _host_kernel(op: ops.Op) -> Kernel:
    """A NumPy kernel whose results become device arrays."""
    np_kernel = np_backend.KERNELS[type(op)](op)
    return lambda inputs, env, point: tuple(jax.device_put(v) for v in np_kernel(inputs, env, point))


def _udf(op: ops.UDFOp) -> Kernel:
    def run(inputs, env, point):
        out = op.fn(*[np.asarray(x) for x in inputs])
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return tuple(jax.device_put(np.asarray(v)) for v in out)

    return run


ALIGNED = 64  # bytes: XLA's CPU client computes on a host array of this alignment where it lies (no copy)
IN_PLACE_FROM = 1 << 20  # bytes of a constant from which it is held in host memory NumPy allocates
_in_place = weakref.WeakValueDictionary()  # id -> a device array of device_constant's over host memory
_noted_rows: dict[int, tuple] = {}  # id(row) -> (a weak reference to the row, the constant it is a row of, its index)


def device_constant(array: np.ndarray) -> jax.Array:
    """``array`` (a constant: never written) as a device array. On a CPU, one of at least
    :data:`IN_PLACE_FROM` bytes is used where it lies when it is contiguous and :data:`ALIGNED`,
    else copied once into such memory allocated by NumPy, which asks the kernel for huge pages for
    it: the weight products read XLA's own buffers (4 KiB pages) about 1.3x slower, and a
    constant's rows (:func:`constant_row`) are then views of it, not copies."""
    if array.nbytes < IN_PLACE_FROM or not jax_native._on_cpu():
        return jax.device_put(array)
    if not (array.flags.c_contiguous and array.ctypes.data % ALIGNED == 0):
        raw = np.empty(array.nbytes + ALIGNED, np.uint8)
        start = -raw.ctypes.data % ALIGNED
        held = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
        held[...] = array
        array = held
    out = jax.device_put(array)
    _in_place[id(out)] = out
    return out


def constant_row(whole: jax.Array, k: int) -> jax.Array:
    """Row ``k`` of ``whole``, a device array :func:`device_constant` made over host memory: a view of
    that memory where its rows lie :data:`ALIGNED`, else a copy as :func:`device_constant` makes it;
    noted as ``whole``'s row, so that a stack of its rows in order is ``whole`` itself
    (:func:`constant_of`)."""
    row = device_constant(np.asarray(whole)[k])  # on a CPU, np.asarray is a view of the device array's memory
    if len(_noted_rows) >= 4096:  # the rows nothing holds any more
        for key in [key for key, (ref, _, _) in _noted_rows.items() if ref() is None]:
            del _noted_rows[key]
    _noted_rows[id(row)] = (weakref.ref(row), whole, k)
    return row


def constant_of(tensors) -> jax.Array | None:
    """The device constant whose rows, in order and all of them, ``tensors`` are (:func:`constant_row`),
    or None."""
    whole = None
    for k, tensor in enumerate(tensors):
        ref, of, at = _noted_rows.get(id(tensor), (None, None, None))
        if ref is None or ref() is not tensor or at != k or (whole is not None and of is not whole):
            return None
        whole = of
    return whole if whole is not None and whole.shape[0] == len(tensors) else None


def host_rows(value) -> list | None:
    """The rows of ``value`` (a NumPy array, or a device array :func:`device_constant` made over host
    memory) as separate device arrays: views of its memory where its rows lie :data:`ALIGNED`
    (:func:`constant_row`); None for any other device array."""
    if isinstance(value, np.ndarray):
        return [device_constant(row) for row in value]
    if _in_place.get(id(value)) is not value:
        return None
    return [constant_row(value, k) for k in range(value.shape[0])]


def _const(op: ops.ConstOp) -> Kernel:
    array = op.value.array
    if not op.num_domain_axes:
        value = device_constant(array)
        return lambda inputs, env, point: (value,)
    whole = device_constant(array)
    if op.num_domain_axes != 1 or _in_place.get(id(whole)) is not whole:
        return lambda inputs, env, point: (jax.device_put(array[point]),)
    rows: dict = {}  # a row once made, for every later read of it in the run

    def run(inputs, env, point):
        row = rows.get(point)
        if row is None:
            row = rows[point] = constant_row(whole, point[0])
        return (row,)

    return run


def kernel(op: ops.Op, compiled: dict, donate: frozenset = frozenset()) -> Kernel:
    """The kernel of ``op``: a host function, or an :class:`Island` (one jitted function).

    ``compiled`` (static key -> jitted function) is kept per op by the backend,
    so a program run again reuses what its earlier runs compiled; ``donate``:
    the inputs the kernel may donate.
    """
    if isinstance(op, ops.UDFOp):
        return _udf(op)
    if isinstance(op, ops.ConstOp):
        return _const(op)
    if isinstance(op, HOST):
        return _host_kernel(op)
    if isinstance(op, ops.FusedOp):
        return Island(op.steps, op.outputs, compiled, donate)
    if type(op) not in IMPLS and not isinstance(op, INDEXED):
        raise TempoError(f"the jax backend has no kernel for {op.name}")
    return Single(op, compiled, donate)


class Single:
    """One op as a one-step :class:`Island` over all the inputs it is given (made at its first call)."""

    def __init__(self, op: ops.Op, compiled: dict, donate: frozenset = frozenset()):
        self.op, self.compiled, self.donate, self.island = op, compiled, donate, None

    def __call__(self, inputs, env, point):
        if self.island is None:
            step = ops.FusedStep(self.op, tuple((-1, k) for k in range(len(inputs))), ())
            self.island = Island((step,), tuple((0, k) for k in range(self.op.num_outputs)), self.compiled,
                                 self.donate)
        return self.island(inputs, env, point)


@jax.jit
def _row(buffer, i):
    return lax.dynamic_index_in_dim(buffer, i, 0, keepdims=False)


_rows = jax.jit(lambda buffer, start, size: lax.dynamic_slice_in_dim(buffer, start, size, 0), static_argnums=2)
_set_row = jax.jit(lambda buffer, i, value: lax.dynamic_update_index_in_dim(buffer, value.astype(buffer.dtype),
                                                                            i, 0), donate_argnums=0)
_set_rows = jax.jit(lambda buffer, start, values: lax.dynamic_update_slice_in_dim(buffer, values, start, 0),
                    donate_argnums=0)
_stack_some = jax.jit(lambda values, dtype: jnp.stack([v.astype(dtype) for v in values]), static_argnums=1)


def _stack(values: tuple, dtype) -> jax.Array:
    """The stack of ``values`` as ``dtype``, by jitted stacks of at most ``NOTED_ROWS`` operands: a
    jitted stack's executable grows with its operands (tens of MiB on CPU for thousands of scalars)."""
    if len(values) <= NOTED_ROWS:
        return _stack_some(values, dtype)
    return jnp.concatenate([_stack_some(values[k:k + NOTED_ROWS], dtype) for k in range(0, len(values), NOTED_ROWS)])


_write_rows = jax.jit(lambda buffer, start, values: lax.dynamic_update_slice_in_dim(
    buffer, jnp.stack([v.astype(buffer.dtype) for v in values]), start, 0), donate_argnums=0)


def _zeros(shape: tuple, dtype) -> jax.Array:
    """A device array of zeros, put from the host: an eager ``jnp.zeros`` compiles an XLA executable
    per shape (as ``jnp.asarray`` of a host array does), each some 200 KiB of a CPU process."""
    return jax.device_put(np.zeros(shape, dtype))


NOTED_ROWS = 64  # consecutive rows a buffer notes before writing them in (a noted row: ~2 KiB of host objects)


class Rows:
    """A block or window store's buffer whose row writes are deferred.

    A write only notes its row's value. A read of a noted row returns that
    value itself; any other read applies the notes first: when every row is
    noted (a block written step by step, then read whole by a vectorized
    learning step) the buffer is one stack of them, otherwise each noted row
    is written into the buffer by a donated update. An acting loop so costs
    no launch per row written. Every ``NOTED_ROWS`` consecutive rows noted are
    written in by one update, so that a long block holds a
    bounded number of separate row arrays (each one costs host memory far
    beyond its bytes) and no stack has as many operands as the block has rows.
    """

    __slots__ = ("shape", "dtype", "buffer", "pending")

    def __init__(self, shape: tuple, dtype: str):
        self.shape, self.dtype, self.buffer, self.pending = shape, np.dtype(dtype), None, {}

    def row(self, index: int):
        value = self.pending.get(index)
        if value is None:
            return _row(self.applied(), index)
        return value if value.dtype == self.dtype else value.astype(self.dtype)

    def note(self, index: int, value) -> None:
        """Row ``index`` set to ``value``: noted, and written in with the rows noted before it once
        ``NOTED_ROWS`` consecutive rows are noted, or the block's last row after rows written in."""
        pending = self.pending
        pending[index] = value
        count, first = len(pending), index + 1 - len(pending)
        due = count == NOTED_ROWS or (index == self.shape[0] - 1 and self.buffer is not None)
        if due and count < self.shape[0] and all(first + k in pending for k in range(count)):
            buffer = _zeros(self.shape, self.dtype) if self.buffer is None else self.buffer
            self.buffer, self.pending = _write_rows(buffer, first, tuple(pending[first + k] for k in range(count))), {}

    def put(self, start: int, values) -> None:
        """Rows ``start:start + len(values)`` set to ``values`` (one buffer when they are all of it)."""
        values = values if values.dtype == self.dtype else values.astype(self.dtype)
        if start == 0 and values.shape[0] == self.shape[0]:
            self.buffer, self.pending = values, {}
        else:
            self.buffer = _set_rows(self.applied(), start, values)

    def applied(self):
        """The buffer with every noted row written into it."""
        pending = self.pending
        if pending:
            if len(pending) == self.shape[0] and self.buffer is None:
                self.buffer = _stack(tuple(pending[k] for k in range(self.shape[0])), self.dtype)
            else:
                buffer = _zeros(self.shape, self.dtype) if self.buffer is None else self.buffer
                for k, value in pending.items():
                    buffer = _set_row(buffer, k, value)
                self.buffer = buffer
            self.pending = {}
        elif self.buffer is None:
            self.buffer = _zeros(self.shape, self.dtype)
        return self.buffer


class JaxBackend(Backend):
    """JAX on ``device`` (JAX's default device when None; ``cpu``, ``gpu``/``cuda`` by platform)."""

    name = "jax"
    donates = True
    copies_constants = True

    def __init__(self, device: str | None = None):
        self.device, self.compiled = None, {}  # (id(op), donated inputs) -> (op, its jitted functions by static key)
        self.loops: dict[tuple, tuple] = {}  # (id(loop), plan signature) -> (loop, its compiled form)
        self.stacks: dict[tuple, tuple] = {}  # :meth:`stack`'s key -> weak references to its result and parts
        if device:
            platform = "gpu" if device in ("cuda", "gpu") else device
            try:
                self.device = jax.devices(platform)[0]
            except RuntimeError:
                raise TempoError(f"jax backend: no {device!r} device here (JAX sees "
                                 f"{', '.join(sorted({d.platform for d in jax.devices()}))}); use backend='jax' "
                                 f"for the default device, or install jax with GPU support "
                                 f"(pip install 'jax[cuda12]') on a machine with a GPU") from None

    def covers(self, op_type: type) -> bool:
        return op_type in IMPLS or issubclass(op_type, (*HOST, *INDEXED, ops.ConstOp, ops.UDFOp, ops.FusedOp))

    @property
    def device_kind(self) -> str:
        platform = self.device.platform if self.device is not None else jax.default_backend()
        return "gpu" if platform in ("gpu", "cuda") else "cpu"

    @property
    def skips_masked_rows(self) -> bool:
        """On a CPU with the native stacked products (:mod:`.jax_native`): a K/V buffer masked to the
        rows written so far is read up to the current position."""
        return self.device_kind == "cpu" and jax_native.available()

    def weight_panel(self, rows: int) -> int | None:
        """On a CPU with the native panel product (:mod:`.jax_native`), the NumPy backend's panels;
        else None (XLA's dot reads the matrix as it is)."""
        if rows > jax_native.MAX_ROWS or self.device_kind != "cpu" or not jax_native.available():
            return None
        return 64 if 2 <= rows <= 4 else 32

    @contextlib.contextmanager
    def running(self):
        device = jax.default_device(self.device) if self.device is not None else contextlib.nullcontext()
        with x64(True), device, jax_staging.dropped():
            yield

    def kernel(self, op: ops.Op, donate: frozenset = frozenset()) -> Kernel:
        held = self.compiled.get((id(op), donate))
        if held is None or held[0] is not op:
            held = self.compiled[(id(op), donate)] = (op, {})
        with self.running():
            return kernel(op, held[1], donate)

    def stack(self, tensors: list, shape: tuple, dtype: str):
        """The stack of ``tensors``; the same array again for the same device arrays while it is
        alive (a device loop's launches gather the layers' weights so, once each)."""
        if not tensors:
            return jnp.zeros(tuple(shape), dtype=dtype)
        whole = constant_of(tensors) if tuple(shape) == (len(tensors),) else None
        if whole is not None and whole.dtype == dtype:  # a constant's rows, all of them in order: the constant
            return whole
        key = (tuple(id(t) for t in tensors), tuple(shape), dtype)
        held = self.stacks.get(key)
        if held is not None:
            out, parts = held[0](), [ref() for ref in held[1]]
            if out is not None and not out.is_deleted() and all(a is b for a, b in zip(parts, tensors)):
                return out
        if not any(isinstance(t, jax.Array) for t in tensors):  # host values: stacked on the host, one transfer
            host = np.stack([np.asarray(t) for t in tensors]).astype(dtype, copy=False)
            return jax.device_put(host.reshape(tuple(shape) + host.shape[1:]))
        out = _stack(tuple(t if isinstance(t, jax.Array) else np.asarray(t) for t in tensors), np.dtype(dtype))
        out = out.reshape(tuple(shape) + out.shape[1:])
        if all(isinstance(t, jax.Array) for t in tensors):
            if len(self.stacks) >= 256:  # drop the stacks nothing holds any more
                self.stacks = {k: v for k, v in self.stacks.items() if v[0]() is not None}
            self.stacks[key] = (weakref.ref(out), [weakref.ref(t) for t in tensors])
        return out

    def cast(self, tensor, dtype: str):
        if not isinstance(tensor, jax.Array):
            return jax.device_put(np.asarray(tensor, dtype=dtype))
        return tensor if tensor.dtype == dtype else tensor.astype(dtype)

    def broadcast(self, tensor, shape: tuple):
        return jnp.broadcast_to(tensor, tuple(shape))

    def to_numpy(self, tensor):
        with x64(True):
            return np.asarray(tensor)

    def empty(self, shape: tuple, dtype: str):
        return Rows(tuple(shape), dtype)

    def write_into(self, buffer, index, value):
        if isinstance(index, slice):  # rows a compiled loop wrote back
            buffer.put(index.start, value)
        else:
            buffer.note(index, value)
        return buffer

    def device_loop(self, plan, sdg):
        """A planned loop (:mod:`tempo.plan.device_loops`) as one jitted ``lax.scan``
        (:mod:`tempo.runtime.backends.jax_loops`), or None where a step has no traced form."""
        from tempo.runtime.backends import jax_loops

        key = (id(plan.loop), plan.signature())
        held = self.loops.get(key)
        if held is None or held[0] is not plan.loop:  # kept for the program's later runs
            held = self.loops[key] = (plan.loop, jax_loops.compile_loop(plan, sdg))
        return held[1]

    def view(self, buffer, index):
        if not jax.config.jax_enable_x64:  # a read after the run (fetching), outside running()
            with x64(True):
                return self.view(buffer, index)
        if isinstance(index, slice):
            rows = buffer.applied()
            if index.start == 0 and index.stop == rows.shape[0]:
                return rows  # a whole block: read once all its rows are written, so never donated later
            return _rows(rows, index.start, index.stop - index.start)
        return buffer.row(index)

    def detach(self, tensor, sources: list):
        return tensor  # immutable: a value never changes under a reader

    def nbytes(self, tensor) -> int:
        return math.prod(tensor.shape) * tensor.dtype.itemsize
