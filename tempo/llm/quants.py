"""GGML block formats read with NumPy: dequantisation vectorised over blocks.

A quantised GGUF tensor is rows of blocks along its last (input) axis; each
block is a fixed number of bytes holding a fixed number of weights with their
scales. :func:`dequantize` turns the raw bytes ``(rows, bytes per row)`` into
float32 ``(rows, columns)`` for the types small Llama-family files use.
Each format's function takes the blocks as a ``(n, bytes per block)`` uint8
array and returns ``(n, weights per block)`` float32, every block at once.
"""
from __future__ import annotations

import numpy as np

from tempo.errors import TempoError


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte ``start`` of every block, as float32 (n, 1)."""
    return np.ascontiguousarray(blocks[:, start:start + 2]).view(np.float16).astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """Bytes (..., b) as their low then their high 4 bits: (..., 2b) uint8."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def q8_0(blocks: np.ndarray) -> np.ndarray:
    """32 weights: a float16 scale ``d`` and 32 int8 ``q``; ``w = d * q``."""
    return _half(blocks, 0) * blocks[:, 2:34].view(np.int8)


def q4_0(blocks: np.ndarray) -> np.ndarray:
    """32 weights: ``d`` and 16 bytes of 4-bit ``q`` (low nibbles first); ``w = d * (q - 8)``."""
    return _half(blocks, 0) * (_nibbles(blocks[:, 2:18]).astype(np.int8) - 8)


def q4_1(blocks: np.ndarray) -> np.ndarray:
    """32 weights: ``d``, ``m`` and 16 bytes of 4-bit ``q``; ``w = d * q + m``."""
    return _half(blocks, 0) * _nibbles(blocks[:, 4:20]) + _half(blocks, 2)


def q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins (n, 8) packed into 12 bytes (n, 12) of a Q4_K block."""
    s = packed.astype(np.uint8)
    low = np.concatenate([s[:, 0:4] & 63, s[:, 8:12] & 0x0F | (s[:, 0:4] >> 6) << 4], axis=1)
    mins = np.concatenate([s[:, 4:8] & 63, s[:, 8:12] >> 4 | (s[:, 4:8] >> 6) << 4], axis=1)
    return low.astype(np.float32), mins.astype(np.float32)


def q4_k(blocks: np.ndarray) -> np.ndarray:
    """256 weights in 8 sub-blocks of 32: ``d``, ``dmin``, 12 bytes of six-bit scales and mins,
    128 bytes of 4-bit ``q`` (each 32 bytes: one sub-block's low nibbles, the next one's high);
    ``w = d * scale * q - dmin * min``."""
    n = len(blocks)
    scale, low = q4_k_scales(blocks[:, 4:16])
    q = _nibbles(blocks[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32)
    d, dmin = _half(blocks, 0)[:, :, None], _half(blocks, 2)[:, :, None]
    return (d * scale[:, :, None] * q - dmin * low[:, :, None]).reshape(n, 256)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    """256 weights in two halves of 128: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8
    scales (one per 16 weights), ``d``; ``w = d * scale * (q - 32)``."""
    n = len(blocks)
    ql = blocks[:, 0:128].reshape(n, 2, 2, 32)                  # half, (first, second) 32 bytes
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)           # (n, half, quarter, 32)
    high = (qh >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3
    q = (low | high << 4).astype(np.int8) - 32
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32).reshape(n, 2, 4, 2, 1)
    w = _half(blocks, 208).reshape(n, 1, 1, 1, 1) * scales * q.reshape(n, 2, 4, 2, 16)
    return w.reshape(n, 256)


def f32(blocks: np.ndarray) -> np.ndarray:
    return blocks.view(np.float32)


def f16(blocks: np.ndarray) -> np.ndarray:
    return blocks.view(np.float16).astype(np.float32)


def bf16(blocks: np.ndarray) -> np.ndarray:
    return (blocks.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


# GGML type name -> (weights per block, bytes per block, block -> float32 weights)
FORMATS = {
    "F32": (1, 4, f32), "F16": (1, 2, f16), "BF16": (1, 2, bf16),
    "Q8_0": (32, 34, q8_0), "Q4_0": (32, 18, q4_0), "Q4_1": (32, 20, q4_1),
    "Q4_K": (256, 144, q4_k), "Q6_K": (256, 210, q6_k),
}


def check_type(type_name: str, source: str) -> None:
    """A TempoError naming ``type_name`` when it is not one of :data:`FORMATS`."""
    if type_name not in FORMATS:
        raise TempoError(f"{source}: unsupported quantisation type {type_name}; supported: {', '.join(FORMATS)}")


def dequantize(raw: np.ndarray, type_name: str, columns: int, source: str = "tensor") -> np.ndarray:
    """The float32 weights (rows, ``columns``) of ``raw``, the bytes (rows, bytes per row) of a
    tensor of GGML type ``type_name``."""
    check_type(type_name, source)
    per_block, size, decode = FORMATS[type_name]
    raw = np.ascontiguousarray(raw).view(np.uint8)
    rows = raw.size // (columns // per_block * size) if columns % per_block == 0 else 0
    if rows == 0 or raw.size != rows * columns // per_block * size:
        raise TempoError(f"{source}: {raw.size} bytes do not hold rows of {columns} {type_name} weights")
    return decode(raw.reshape(-1, size)).reshape(rows, columns)
