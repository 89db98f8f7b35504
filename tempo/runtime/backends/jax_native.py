"""Native products inside the JAX backend's compiled programs on a CPU: XLA FFI calls into the NumPy
backend's skinny product kernels.

XLA's CPU dot multiplies one row by a ``(576, 1536)`` matrix at about 28 GB/s
of weights read (one thread); ``skinny_products.c``'s kernel reads the same
matrix stored as column panels (:mod:`tempo.transforms.pack_weights`) at
about 37 GB/s, the rate of a plain read. ``jax_native.cc`` wraps the kernel
as an XLA FFI handler (``jax.ffi``'s typed API, the headers of
``jax.ffi.include_dir()``); it is built with this machine's C++ compiler at
first use, cached like :mod:`tempo.runtime.native`'s libraries, and
registered for the CPU platform.

:func:`panel_product` is a weight product; :func:`stacked_product` is
attention's (``keys @ q^T``, ``weights @ values``), each head's matrix read
where it lies in a K/V buffer of (positions, batch, heads, head size), where
XLA copies the buffer transposed before its batched dot, and, for a buffer
masked to the rows written so far (:class:`RowMasked`, the masked-reads
pass's ``mask_products``), read only at those rows: a decoding step reads
the positions so far, not the whole buffer. :func:`attention_call` is a
decoding step's whole attention (scores, softmax, values) for every
(sequence, head) pair in one call of the NumPy backend's ``attend_steps``
(``numpy_attention.c``), each part's keys and values read where they lie, at
the rows its mask keeps (:mod:`.jax_attention` finds the steps it replaces). Each is None where it does not
apply (another dtype, shape or layout, not a CPU, the library not built:
:func:`unavailable` says why), and the caller multiplies with XLA. The sums
run in the kernels' order: the same products to float32 rounding as XLA's,
not bit for bit.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from tempo.runtime import native

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = tuple(os.path.join(HERE, name) for name in ("jax_native.cc", "skinny_products.c", "numpy_attention.c",
                                                       "vector16.h"))
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c++17", "-w"]
PANEL_PRODUCT, FEW_ROWS, FEW_COLUMNS = "tempo_panel_product", "tempo_stacked_few_rows", "tempo_stacked_few_columns"
ATTEND = "tempo_attend_steps"
MAX_ROWS = 32    # rows of a panel product (the kernel's)
MAX_WIDTH = 64   # columns of a panel, or of a stacked product's matrices (a multiple of 16)
FEW = 4          # rows (or columns) of a stacked product's small side
MAX_K = 1024     # few_columns' inner size (a multiple of 16)
STACKED_FROM = 4096  # elements of a stacked product's large matrices from which the kernels run
MAX_GROUPS, MAX_PARTS, MAX_DEPTH = 4, 4, 64  # attend_steps': queries a head, parts, floats a head
_F32 = np.dtype(np.float32)
_state: dict = {}


def _library_path(compiler: str) -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        with open(source, "rb") as f:
            digest.update(f.read())
    digest.update(" ".join([compiler, *FLAGS, jax.__version__, jax.ffi.include_dir(), native._cpu_flags()]).encode())
    return os.path.join(native.cache_folder(), f"jax_native-{digest.hexdigest()[:16]}.so")


def _build(path: str, compiler: str) -> None:
    """Compile the handlers to ``path`` through a temporary file renamed over it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, "-I", jax.ffi.include_dir(), "-I", HERE, SOURCES[0], "-o", tmp],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            raise OSError(lines[-1] if lines else "the compiler failed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load() -> None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise OSError("no C++ compiler (c++, g++ or $CXX) on the PATH")
    path = _library_path(compiler)
    try:
        if not os.path.exists(path):
            _build(path, compiler)
    except subprocess.SubprocessError as err:
        raise OSError(str(err)) from None
    lib = ctypes.CDLL(path)
    for name in (PANEL_PRODUCT, FEW_ROWS, FEW_COLUMNS, ATTEND):
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="cpu")
    _state["lib"] = lib


def available() -> bool:
    """Whether the handlers are built and registered (built at the first call)."""
    if "why" not in _state:
        _state["why"] = None
        try:
            _load()
        except OSError as err:
            _state["why"] = f"the JAX backend's native products are not built ({err}); XLA's dot runs instead"
    return _state["why"] is None


def unavailable() -> str | None:
    """Why :func:`available` is False (None when it is True)."""
    available()
    return _state["why"]


def _on_cpu() -> bool:
    """Whether the program being traced runs on a CPU (the handlers are registered for it alone)."""
    device = jax.config.jax_default_device
    return (device.platform if device is not None and not isinstance(device, str) else
            device or jax.default_backend()) == "cpu"


def runs_here() -> bool:
    """Whether the native products run in the program being traced (a CPU, the handlers built)."""
    return _on_cpu() and available()


def panel_product(a, b):
    """``a @ b`` inside a traced program for ``a`` (..., 1, m, k), every leading axis 1, at most
    :data:`MAX_ROWS` rows, and ``b`` (count, k, width) float32 panels: (..., count, m, width); None
    where the kernel does not apply."""
    if jnp.ndim(a) < 3 or jnp.ndim(b) != 3:
        return None
    (count, k, width), lead, rows = b.shape, a.shape[:-3], a.shape[-2]
    if (a.shape[-1] != k or a.shape[-3] != 1 or a.dtype != _F32 or b.dtype != _F32 or width % 16
            or width > MAX_WIDTH or not 0 < rows <= MAX_ROWS or k == 0 or any(s != 1 for s in lead)
            or not runs_here()):
        return None
    out = jax.ffi.ffi_call(PANEL_PRODUCT, jax.ShapeDtypeStruct((count, rows, width), _F32))(a.reshape(rows, k), b)
    return out.reshape(*lead, count, rows, width)


class RowMasked:
    """The logical array ``where(rows, value, fill)`` with ``rows`` a bool vector along ``axis`` of
    ``value`` (an array or a lazily permuted one, :mod:`.jax_layout`) and ``fill`` a scalar, not
    materialised: a stacked product whose large operand it is reads only the rows ``rows`` keeps."""

    __slots__ = ("value", "rows", "axis", "fill")

    def __init__(self, value, rows, axis: int, fill=0.0):
        self.value, self.rows, self.axis, self.fill = value, rows, axis, fill

    @property
    def ndim(self) -> int:
        return len(self.value.shape)

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)

    def astype(self, dtype):
        return RowMasked(self.value.astype(dtype), self.rows, self.axis, self.fill)

    def dense(self):
        column = self.rows.reshape((-1,) + (1,) * (self.ndim - self.axis - 1))
        return jnp.where(column, _dense(self.value), jnp.asarray(self.fill, self.dtype))


def _view(x) -> tuple:
    """A traced value (or a lazily permuted one: ``base``, ``perm``, :mod:`.jax_layout`) as its base
    array and the logical axes' strides in it, in elements."""
    base, perm = (x.base, x.perm) if hasattr(x, "perm") else (x, tuple(range(jnp.ndim(x))))
    strides, step = [0] * len(base.shape), 1
    for axis in reversed(range(len(base.shape))):
        strides[axis], step = step, step * base.shape[axis]
    return base, [strides[p] for p in perm]


def _batch_stride(shape: tuple, strides: list) -> int | None:
    """The stride between consecutive matrices of the batch axes taken in order as one (0 where there
    is one matrix), or None where they are not evenly spaced."""
    over = [(d, s) for d, s in zip(shape[:-2], strides[:-2]) if d > 1]
    if any(outer != inner * d for (_, outer), (d, inner) in zip(over, over[1:])):
        return None
    return over[-1][1] if over else 0


def _large(x, rows: int):
    """The large operand ``x`` of a stacked product as (its base, the logical strides, the mask over
    its matrices' rows: all of them where ``x`` is not masked along them, the masked rows' value),
    or None where its matrices' rows are not contiguous or not evenly spaced."""
    mask, fill = jnp.ones((rows,), bool), 0.0
    if isinstance(x, RowMasked):
        if x.axis != x.ndim - 2:
            return None
        x, mask, fill = x.value, x.rows.reshape(rows), x.fill
    base, strides = _view(x)
    if strides[-1] != 1 or _batch_stride(tuple(x.shape), strides) is None:
        return None
    return base, strides, mask, jnp.asarray(fill, _F32).reshape(())


def stacked_product(a, b):
    """``a @ b`` inside a traced program for stacks of float32 matrices of the same batch shape, the
    large operand a lazily permuted value read where its base lies (no transposed copy, its matrices
    evenly spaced) and, where it is :class:`RowMasked` along its matrices' rows, read at the rows
    kept alone: ``a``'s matrices of at most :data:`FEW` rows against ``b``'s of 16 to 64 columns
    (attention's ``weights @ values``), or ``a``'s of many rows against ``b``'s of at most :data:`FEW`
    columns (``keys @ q^T``), each row of the large side contiguous and the large side of at least
    :data:`STACKED_FROM` elements; None where neither kernel applies."""
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    if (len(shape_a) < 3 or shape_a[:-2] != shape_b[:-2] or a.dtype != _F32 or b.dtype != _F32
            or 0 in shape_a or 0 in shape_b or not _on_cpu()):
        return None
    (m, k), n, lead = shape_a[-2:], shape_b[-1], shape_a[:-2]
    count = int(np.prod(lead))
    if m <= FEW and n % 16 == 0 and n <= MAX_WIDTH and k * n >= STACKED_FROM:
        large = _large(b, k)
        if large is None or not available():
            return None
        base, strides, mask, fill = large
        out = jax.ffi.ffi_call(FEW_ROWS, jax.ShapeDtypeStruct((count, m, n), _F32))(
            _dense(a).reshape(count, m, k), base.reshape(-1), mask, fill, ldb=np.int64(strides[-2]),
            stride_b=np.int64(_batch_stride(shape_b, strides)))
    elif n <= FEW and k % 16 == 0 and k <= MAX_K and m * k >= STACKED_FROM:
        large = _large(a, m)
        if large is None or not available():
            return None
        base, strides, mask, fill = large
        out = jax.ffi.ffi_call(FEW_COLUMNS, jax.ShapeDtypeStruct((count, m, n), _F32))(
            base.reshape(-1), _dense(b).reshape(count, k, n), mask, fill, lda=np.int64(strides[-2]),
            stride_a=np.int64(_batch_stride(shape_a, strides)))
    else:
        return None
    return out.reshape(*lead, m, n)


def _dense(x):
    """A traced value (or a lazily permuted or masked one) as a plain array."""
    if isinstance(x, RowMasked):
        return x.dense()
    return jnp.transpose(x.base, x.perm) if hasattr(x, "perm") else x


def attention_call(q, parts: list, scale):
    """A decoding step's attention inside a traced program, as a function of no arguments that makes
    the call: ``softmax(s) @ V`` for the float32
    queries ``q`` (batch, heads, groups, head size), one softmax over the scores ``s = scale * q @
    keys^T`` of every part of ``parts``, each ``(keys, values, rows)`` with ``keys`` and ``values``
    (batch or 1, heads or 1, R, head size) (lazily permuted ones read where their base lies) and
    ``rows`` (R,) bool, the rows of the part that count, which must be one run (the caller checks
    it at run time); ``scale`` a float32 scalar. None where ``attend_steps`` does not take them
    (more than :data:`MAX_GROUPS` groups or :data:`MAX_PARTS` parts, a head size that is not a
    multiple of 16 up to :data:`MAX_DEPTH`, a head's rows not contiguous, not a CPU, the library
    not built)."""
    if jnp.ndim(q) != 4 or q.dtype != _F32 or not 0 < len(parts) <= MAX_PARTS:
        return None
    batch, heads, groups, depth = q.shape
    if depth % 16 or not 0 < depth <= MAX_DEPTH or not 0 < groups <= MAX_GROUPS:
        return None
    operands, strides = [], []
    for keys, values, rows in parts:
        count = rows.shape[0]
        for x in (keys, values):
            if x.ndim != 4 or x.dtype != _F32 or tuple(x.shape[2:]) != (count, depth) or x.shape[0] not in (batch, 1) \
                    or x.shape[1] not in (heads, 1):
                return None
            base, logical = _view(x)
            if logical[-1] != 1:
                return None
            operands.append(base.reshape(-1))
            strides += [0 if n == 1 else s for n, s in zip(x.shape[:2], logical[:2])] + [logical[2]]
        operands.append(rows)
    if not runs_here():
        return None
    call = jax.ffi.ffi_call(ATTEND, jax.ShapeDtypeStruct(q.shape, _F32))
    return lambda: call(q, jnp.asarray(scale, _F32).reshape(()), *operands, strides=np.array(strides, np.int64))
