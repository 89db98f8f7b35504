"""Rotary position embeddings: inverse frequencies, with Llama-3's frequency scaling."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from tempo.errors import TempoError


def inverse_frequencies(head_dim: int, theta: float, scaling: Mapping | None = None) -> np.ndarray:
    """``theta ** (-2k / head_dim)`` for ``k < head_dim / 2`` (float32), rescaled as ``scaling`` says.

    ``scaling`` is a config's ``rope_scaling``: ``None`` or type ``default``
    leaves the frequencies alone; type ``llama3`` divides the low frequencies
    by ``factor`` and blends smoothly between ``low_freq_factor`` and
    ``high_freq_factor`` (Llama 3.1's long-context scaling).
    """
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    inv = inv.astype(np.float32)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise TempoError(f"unsupported rope_scaling type {kind!r}; supported: default, llama3")
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original = float(scaling["original_max_position_embeddings"])
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)


def rotate_half_matrix(head_dim: int) -> np.ndarray:
    """``R`` with ``x @ R == cat(-x[half:], x[:half])``: the rotation of the two halves of each head."""
    half = head_dim // 2
    r = np.zeros((head_dim, head_dim), np.float32)
    r[np.arange(half) + half, np.arange(half)] = -1.0
    r[np.arange(half), np.arange(half) + half] = 1.0
    return r
