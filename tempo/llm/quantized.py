"""Weight products computed from Q8_0, Q4_0, Q4_1, Q4_K and Q6_K weights kept quantised.

A decoding step reads every weight once per token, so its time is the rate
memory delivers them at. :class:`QuantizedMatrices` keeps a layer stack of
matrices ``W[l]`` (out, in) as blocks of integers with float32 scales, by
rows: ``(L, out, blocks, ...)``. ``x @ W[l]^T`` applies the block scales to
each block's dot products with ``x``, not to the weights:

    y[n] = sum_b d[n, b] * (q[n, b, :] . x[b, :]) + m[n, b] * sum(x[b, :])

For a few rows of ``x`` (decoding) the native kernels compute it
(``quantized_kernels.c``, built by :mod:`tempo.llm.native`): each row's
integers are widened to float32 in registers and only the quantised bytes
and scales stream from memory. For more rows (a prompt), or where the kernels
are not built, NumPy computes it a panel of rows at a time: the panel's
integers widened to float32 in a scratch array of about ``PANEL_BYTES`` that
stays in the cache, each block's dot products from one batched product
(blocks as the batch).

Each GGML type is read into one of two forms, keeping its integers as stored:

- **int8 blocks** (no ``m``): Q8_0's blocks of 32; Q6_K's sub-blocks of 16,
  ``q - 32`` as int8 and ``d * scale`` as the block's scale;
- **4-bit blocks**, bytes holding a block's first half in their low nibbles
  and its second half in their high ones: Q4_0 and Q4_1 (blocks of 32, one
  ``d`` and ``m`` each; ``m = -8 d`` for Q4_0) and Q4_K, whose 32 bytes
  hold two sub-blocks of 32 this way, so its blocks are 64 wide with a
  ``d * scale`` and a ``-dmin * min`` per half.

Only the integers and the scales (float32) stream from memory:
:attr:`QuantizedMatrices.nbytes_per_layer`.

With ``int8_inputs`` a product first rounds its input rows to 8 bits per
block of 32 (:func:`rounded_inputs`, as llama.cpp rounds its activations) and
multiplies the rounded rows by the weights: its products of integers are
exact (``int8_input_kernels.c``: AVX512-VNNI's byte dot products, 64 in one
instruction, where the float32 widening takes 16 multiply-adds and two
conversions per 16 weights), so it differs from the float32 product only by
the inputs' rounding (at most half of ``max |x_block| / 127`` per value).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from tempo.errors import TempoError
from tempo.llm import native
from tempo.llm.quants import q4_k_scales

TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")
BLOCK = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 64, "Q6_K": 16}   # weights per block of the stored form
GGML_BLOCK = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q4_K": (256, 144), "Q6_K": (256, 210)}
PANEL_BYTES = 1 << 20  # the float32 scratch of one panel: 1 MB, well inside this CPU's 2 MB L2 per core
NATIVE_ROWS = 8  # the most input rows a product runs the native kernels for (decoding); more: NumPy's BLAS


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[..., start:start + 2]).view(np.float16).astype(np.float32)[..., 0]


def _rows(type_name: str, raw: np.ndarray, out: int, columns: int):
    """One matrix's GGUF bytes (out, bytes per row) in the stored form: ``q`` (out, blocks, ...),
    ``scale`` and ``offset`` (out, blocks) or (out, blocks, 2) for Q4_K's halves; ``offset`` None
    for int8 blocks and Q4_0."""
    per, size = GGML_BLOCK[type_name]
    blocks = np.asarray(raw, np.uint8).reshape(out, columns // per, size)
    if type_name == "Q8_0":
        return np.ascontiguousarray(blocks[..., 2:34]).view(np.int8), _half(blocks, 0), None
    if type_name in ("Q4_0", "Q4_1"):
        start = 2 if type_name == "Q4_0" else 4
        offset = None if type_name == "Q4_0" else _half(blocks, 2)
        return np.ascontiguousarray(blocks[..., start:start + 16]), _half(blocks, 0), offset
    if type_name == "Q4_K":
        n = out * columns // 256
        scale, low = q4_k_scales(blocks.reshape(n, size)[:, 4:16])                   # (n, 8) each
        d, dmin = _half(blocks, 0).reshape(n, 1), _half(blocks, 2).reshape(n, 1)
        q = blocks[..., 16:144].reshape(out, -1, 32)                                 # (out, blocks of 64, 32)
        return (np.ascontiguousarray(q), (d * scale).reshape(out, -1, 2),
                (-(dmin * low)).reshape(out, -1, 2))
    n = out * columns // 256                                                           # Q6_K
    flat = blocks.reshape(n, size)
    ql = flat[:, 0:128].reshape(n, 2, 2, 32)
    qh = flat[:, 128:192].reshape(n, 2, 1, 32)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)
    q = (low | ((qh >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3) << 4).astype(np.int8) - 32
    scale = _half(flat, 208).reshape(n, 1) * flat[:, 192:208].view(np.int8).astype(np.float32)
    return q.reshape(out, -1, 16), scale.reshape(out, -1), None


@dataclass(frozen=True)
class QuantizedMatrices:
    """Matrices (out, in) of one GGML block type stacked over layers, kept quantised, by rows.

    ``q``: (L, out, in / block, block) int8, or (..., block / 2) uint8 of packed 4-bit values
    (low nibbles: a block's first half); ``scale`` and ``offset`` (L, out, in / block), with a
    last axis of 2 (per half block) for Q4_K; ``offset`` None for int8 blocks and for Q4_0
    (whose offset is ``-8 * scale``)."""

    type_name: str
    out_features: int
    in_features: int
    q: np.ndarray
    scale: np.ndarray
    offset: np.ndarray | None
    int8_inputs: bool = False

    def __post_init__(self):
        for name in ("q", "scale", "offset"):            # the native kernels read them as C arrays
            value = getattr(self, name)
            if value is not None and not value.flags.c_contiguous:
                object.__setattr__(self, name, np.ascontiguousarray(value))

    @classmethod
    def from_raw(cls, type_name: str, layers: list[np.ndarray], out_features: int, in_features: int):
        """From each layer's raw GGUF bytes (out, bytes per row) of ``type_name``."""
        if type_name not in TYPES:
            raise TempoError(f"quantised compute supports {', '.join(TYPES)}, not {type_name}")
        parts = [_rows(type_name, raw, out_features, in_features) for raw in layers]
        offset = None if parts[0][2] is None else np.stack([p[2] for p in parts])
        return cls(type_name, out_features, in_features, np.stack([p[0] for p in parts]),
                   np.stack([p[1] for p in parts]), offset)

    @classmethod
    def concat(cls, parts: list["QuantizedMatrices"]) -> "QuantizedMatrices | None":
        """The matrices of ``parts`` (same type and input size) stacked along the outputs, or None
        when they cannot be (different types)."""
        first = parts[0]
        if any(p.type_name != first.type_name or p.in_features != first.in_features for p in parts):
            return None

        def joined(field: str):
            return None if getattr(first, field) is None else np.concatenate([getattr(p, field) for p in parts], 1)

        return cls(first.type_name, sum(p.out_features for p in parts), first.in_features, joined("q"),
                   joined("scale"), joined("offset"), first.int8_inputs)

    def with_int8_inputs(self) -> "QuantizedMatrices":
        """The same matrices (their arrays shared), each product rounding its input rows to 8 bits
        per block of 32 first (:func:`rounded_inputs`)."""
        return replace(self, int8_inputs=True)

    @property
    def num_layers(self) -> int:
        return self.q.shape[0]

    @property
    def block(self) -> int:
        return BLOCK[self.type_name]

    @property
    def nbytes_per_layer(self) -> int:
        """Bytes a product with one layer's matrix reads: the quantised values and their scales."""
        total = self.q.nbytes + self.scale.nbytes + (0 if self.offset is None else self.offset.nbytes)
        return total // self.num_layers

    def matmul(self, x: np.ndarray, layer: int) -> np.ndarray:
        """``x @ W[layer]^T`` for ``x`` (..., in), float32 (..., out): with the native kernels
        for up to :data:`NATIVE_ROWS` rows of ``x`` where they are built
        (:mod:`tempo.llm.native`), else with NumPy (:meth:`panel_matmul`). With
        ``int8_inputs``, ``rounded_inputs(x) @ W[layer]^T``."""
        few = x.size <= NATIVE_ROWS * x.shape[-1]
        if self.int8_inputs:
            if few and native.int8_input_kernels() is not None:
                return self.native_matmul(x, layer)
            return self.panel_matmul(rounded_inputs(x), layer)
        if few and native.kernels() is not None:
            return self.native_matmul(x, layer)
        return self.panel_matmul(x, layer)

    @cached_property
    def _addresses(self) -> tuple:
        """The addresses of layer 0's values, scales and offsets (0: none) and the bytes between
        layers: what each native call passes, computed once."""
        arrays = [self.q, self.scale, self.offset]
        return tuple((0, 0) if a is None else (a.ctypes.data, a.strides[0]) for a in arrays)

    def native_matmul(self, x: np.ndarray, layer: int) -> np.ndarray:
        """``x @ W[layer]^T`` by the native kernels (``quantized_kernels.c``): each row's blocks
        widened in registers, scaled sums in float32. With ``int8_inputs``,
        ``rounded_inputs(x) @ W[layer]^T`` by ``int8_input_kernels.c``."""
        lib = native.int8_input_kernels() if self.int8_inputs else native.kernels()
        if lib is None:
            raise TempoError(native.INT8_INPUTS.unavailable() if self.int8_inputs else native.unavailable())
        self._check(x, layer)                             # the kernels read raw memory: no index checks
        lead = x.shape[:-1]
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, self.in_features)
        y = np.empty((rows.shape[0], self.out_features), np.float32)
        (q, q_step), (d, d_step), (m, m_step) = self._addresses
        blocks = self.in_features // self.block
        if self.int8_inputs:
            if self.q.dtype == np.int8:
                lib.int8_blocks_int8_inputs(q + layer * q_step, d + layer * d_step, address(rows), address(y),
                                            self.out_features, blocks, self.block, rows.shape[0])
            else:
                lib.nibble_blocks_int8_inputs(q + layer * q_step, d + layer * d_step, m and m + layer * m_step,
                                              address(rows), address(y), self.out_features, blocks, self.block,
                                              rows.shape[0])
        elif self.q.dtype == np.int8:
            lib.int8_blocks(q + layer * q_step, d + layer * d_step, address(rows), address(y),
                            self.out_features, blocks, self.block, rows.shape[0])
        else:
            lib.nibble_blocks(q + layer * q_step, d + layer * d_step, m and m + layer * m_step, address(rows),
                              address(y), self.out_features, blocks, self.block, self.scale.ndim - 2,
                              rows.shape[0])
        return y.reshape(*lead, self.out_features)

    def _check(self, x: np.ndarray, layer: int) -> None:
        if x.shape[-1:] != (self.in_features,):
            raise TempoError(f"a product with {self.out_features}x{self.in_features} matrices takes inputs of "
                             f"{self.in_features}, not shape {x.shape}")
        if not 0 <= layer < self.num_layers:
            raise TempoError(f"layer {layer} of a stack of {self.num_layers} matrices")

    def panel_matmul(self, x: np.ndarray, layer: int) -> np.ndarray:
        """``x @ W[layer]^T`` with NumPy, a panel of rows at a time: the panel's integers widened
        to float32 in a scratch of about :data:`PANEL_BYTES`, each block's dot products with ``x``
        from one batched product (blocks as the batch), the block scales applied to those sums."""
        self._check(x, layer)
        lead = x.shape[:-1]
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, self.in_features)
        xb = np.ascontiguousarray(rows.reshape(-1, self.in_features // self.block, self.block).transpose(1, 2, 0))
        half = self.block // 2
        sums = None if self.q.dtype == np.int8 else (xb[:, :half].sum(axis=1), xb[:, half:].sum(axis=1))  # (B, m)
        out = np.empty((self.out_features, rows.shape[0]), np.float32)
        step = max(1, PANEL_BYTES // 4 // self.in_features)
        for start in range(0, self.out_features, step):
            out[start:start + step] = self._panel(xb, sums, layer, slice(start, start + step))
        return np.ascontiguousarray(out.T).reshape(*lead, self.out_features)

    def _panel(self, xb: np.ndarray, sums, layer: int, rows: slice) -> np.ndarray:
        """One panel's outputs (rows, m): its blocks' dot products, then the scales applied."""
        q, d = self.q[layer, rows].swapaxes(0, 1), self.scale[layer, rows].swapaxes(0, 1)   # blocks first
        if sums is None:                                                              # int8 blocks
            dots = np.matmul(q.astype(np.float32), xb)                                # (B, rows, m)
            dots *= d[:, :, None]
            return dots.sum(axis=0)
        half = self.block // 2
        low = np.matmul((q & 0x0F).astype(np.float32), xb[:, :half])
        high = np.matmul((q >> 4).astype(np.float32), xb[:, half:])
        if d.ndim == 2:                                                               # one scale per block
            low += high
            low *= d[:, :, None]
            m = -8 * d if self.offset is None else self.offset[layer, rows].swapaxes(0, 1)
            return low.sum(axis=0) + m.T @ (sums[0] + sums[1])
        low *= d[:, :, 0, None]                                                       # Q4_K: one per half
        high *= d[:, :, 1, None]
        low += high
        m = self.offset[layer, rows].swapaxes(0, 1)
        return low.sum(axis=0) + m[:, :, 0].T @ sums[0] + m[:, :, 1].T @ sums[1]

    def dequantized_stack(self) -> np.ndarray:
        """Every layer's matrix dequantised and transposed: float32 (L, in, out)."""
        return np.stack([self.dequantize(layer).T for layer in range(self.num_layers)])

    def dequantize(self, layer: int) -> np.ndarray:
        """Layer ``layer``'s matrix (out, in) as float32 from the stored form."""
        q, d = self.q[layer], self.scale[layer]
        if q.dtype == np.int8:
            return (d[..., None] * q).reshape(self.out_features, self.in_features)
        values = np.stack([q & 0x0F, q >> 4], axis=2).astype(np.float32)             # (out, B, 2, half)
        d = d[..., None, None] if d.ndim == 2 else d[..., None]
        if self.offset is None:
            m = -8 * d
        else:
            m = self.offset[layer]
            m = m[..., None, None] if m.ndim == 2 else m[..., None]
        return (d * values + m).reshape(self.out_features, self.in_features)


def rounded_inputs(x: np.ndarray) -> np.ndarray:
    """``x`` (..., in) rounded to 8 bits per block of 32 along its last axis, as float32: each
    block's ``d = max |x| / 127`` times ``rint(x * (1 / d))`` (0 where the block is 0), the values
    the 8-bit input kernels multiply by (float32 arithmetic, in their order)."""
    x = np.ascontiguousarray(x, np.float32)
    width = x.shape[-1]
    pad = -width % 32
    blocks = np.pad(x.reshape(-1, width), ((0, 0), (0, pad))).reshape(-1, (width + pad) // 32, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    inverse = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    rounded = d * np.rint(blocks * inverse)
    return rounded.reshape(-1, width + pad)[:, :width].reshape(x.shape)


def address(a: np.ndarray) -> int:
    """The address of ``a``'s first byte (C-contiguous): through a ctypes view of a writable
    array's buffer, 4x faster than ``a.ctypes.data`` (0.2 against 0.8 us: a decoding step
    makes over a hundred products)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):          # read-only or empty
        return a.ctypes.data
