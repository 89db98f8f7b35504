"""Weight products computed from Q8_0, Q4_0 and Q4_1 weights kept quantised (NumPy).

A decoding step reads every weight once per token, so its time is the rate
memory delivers them at. :class:`QuantizedMatrices` keeps a layer stack of
matrices ``W[l]`` (out, in) in their block format, stored as panels of rows:
``(L, panels, blocks, rows, block bytes)``. ``x @ W[l]^T`` is computed one
panel at a time: the panel's 4-bit or 8-bit integers are widened to float32
in a scratch array of about ``PANEL_BYTES`` that stays in the cache, each
block's dot products with ``x`` come from one batched product (blocks as the
batch), and the block scales are applied to those sums, not to the weights:

    y[n] = sum_b d[n, b] * (q[n, b, :] . x[b, :]) + m[n, b] * sum(x[b, :])

(``m = -8 d`` for Q4_0, the block minimum for Q4_1, none for Q8_0). Only the
quantised bytes and the scales (float32) stream from memory:
:attr:`QuantizedMatrices.nbytes_per_layer`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError

TYPES = ("Q8_0", "Q4_0", "Q4_1")
BLOCK = 32
PANEL_BYTES = 1 << 20  # the float32 scratch of one panel: 1 MB, well inside this CPU's 2 MB L2 per core


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[..., start:start + 2]).view(np.float16).astype(np.float32)[..., 0]


@dataclass(frozen=True)
class QuantizedMatrices:
    """Matrices (out, in) of one GGML block type stacked over layers, kept quantised.

    ``q``: (L, panels, in / 32, rows per panel, 32) int8 for Q8_0, or (..., 16) uint8 of
    packed 4-bit values (low nibbles: a block's first 16) for Q4_0/Q4_1; ``scale`` and
    ``offset`` (L, panels, in / 32, rows per panel) float32 (``offset``: Q4_1's block minimum;
    None for Q8_0 and Q4_0, whose offset is ``-8 * scale``). Rows past ``out`` (the last
    panel's padding) have scale and offset 0."""

    type_name: str
    out_features: int
    in_features: int
    q: np.ndarray
    scale: np.ndarray
    offset: np.ndarray | None

    @classmethod
    def from_raw(cls, type_name: str, layers: list[np.ndarray], out_features: int, in_features: int):
        """From each layer's raw GGUF bytes (out, bytes per row) of ``type_name``."""
        if type_name not in TYPES:
            raise TempoError(f"quantised compute supports {', '.join(TYPES)}, not {type_name}")
        blocks = np.stack([np.asarray(r, np.uint8).reshape(out_features, in_features // BLOCK, -1)
                           for r in layers])                                    # (L, out, B, bytes)
        rows = max(1, min(out_features, PANEL_BYTES // 4 // in_features))
        panels = -(-out_features // rows)
        pad = panels * rows - out_features
        blocks = np.pad(blocks, ((0, 0), (0, pad), (0, 0), (0, 0)))
        blocks = blocks.reshape(len(layers), panels, rows, in_features // BLOCK, -1).swapaxes(2, 3)
        d = _half(blocks, 0)
        if type_name == "Q8_0":
            return cls(type_name, out_features, in_features,
                       np.ascontiguousarray(blocks[..., 2:34]).view(np.int8), d, None)
        m = None if type_name == "Q4_0" else _half(blocks, 2)
        start = 2 if type_name == "Q4_0" else 4
        return cls(type_name, out_features, in_features, np.ascontiguousarray(blocks[..., start:start + 16]), d, m)

    @classmethod
    def concat(cls, parts: list["QuantizedMatrices"]) -> "QuantizedMatrices | None":
        """The matrices of ``parts`` (same type and input size) stacked along the outputs, or None
        when they cannot be (different types)."""
        first = parts[0]
        if any(p.type_name != first.type_name or p.in_features != first.in_features for p in parts):
            return None
        layers = [np.concatenate([p.raw_rows(l) for p in parts]) for l in range(first.q.shape[0])]
        return cls.from_raw(first.type_name, layers, sum(p.out_features for p in parts), first.in_features)

    def raw_rows(self, layer: int) -> np.ndarray:
        """Layer ``layer``'s rows back in GGUF block bytes (out, bytes per row)."""
        d = self.scale[layer].astype(np.float16)[..., None].view(np.uint8)
        parts = [d, self.q[layer].view(np.uint8)]
        if self.type_name == "Q4_1":
            parts.insert(1, self.offset[layer].astype(np.float16)[..., None].view(np.uint8))
        blocks = np.concatenate(parts, axis=-1).swapaxes(1, 2)                  # (panels, rows, B, bytes)
        return blocks.reshape(-1, blocks.shape[2] * blocks.shape[3])[:self.out_features]

    @property
    def num_layers(self) -> int:
        return self.q.shape[0]

    @property
    def nbytes_per_layer(self) -> int:
        """Bytes a product with one layer's matrix reads: the quantised values and their scales."""
        total = self.q.nbytes + self.scale.nbytes + (0 if self.offset is None else self.offset.nbytes)
        return total // self.num_layers

    def matmul(self, x: np.ndarray, layer: int) -> np.ndarray:
        """``x @ W[layer]^T`` for ``x`` (..., in), float32 (..., out), panel by panel."""
        lead = x.shape[:-1]
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, self.in_features)
        xb = np.ascontiguousarray(rows.reshape(-1, self.in_features // BLOCK, BLOCK).transpose(1, 2, 0))
        sums = xb.sum(axis=1) if self.type_name != "Q8_0" else None                 # (B, m)
        out = np.empty((self.q.shape[1], self.q.shape[3], rows.shape[0]), np.float32)
        for p in range(self.q.shape[1]):
            out[p] = self._panel(xb, sums, layer, p)
        y = out.reshape(-1, rows.shape[0])[:self.out_features].T
        return np.ascontiguousarray(y).reshape(*lead, self.out_features)

    def _panel(self, xb: np.ndarray, sums, layer: int, p: int) -> np.ndarray:
        """One panel's outputs (rows, m): its blocks' dot products, then the scales applied."""
        q, d = self.q[layer, p], self.scale[layer, p]
        if self.type_name == "Q8_0":
            dots = np.matmul(q.astype(np.float32), xb)                             # (B, rows, m)
        else:
            half = BLOCK // 2
            dots = np.matmul((q & 0x0F).astype(np.float32), xb[:, :half])
            dots += np.matmul((q >> 4).astype(np.float32), xb[:, half:])
        dots *= d[:, :, None]
        y = dots.sum(axis=0)
        if self.type_name != "Q8_0":
            y += (-8 * d if self.offset is None else self.offset[layer, p]).T @ sums
        return y

    def dequantized_stack(self) -> np.ndarray:
        """Every layer's matrix dequantised and transposed: float32 (L, in, out)."""
        return np.stack([self.dequantize(layer).T for layer in range(self.num_layers)])

    def dequantize(self, layer: int) -> np.ndarray:
        """Layer ``layer``'s matrix (out, in) as float32 (to check the products against)."""
        from tempo.llm.quants import dequantize

        return dequantize(self.raw_rows(layer), self.type_name, self.in_features)
