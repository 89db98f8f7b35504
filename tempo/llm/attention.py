"""Which keys and values a position attends to: causal or a sliding window."""
from __future__ import annotations

from dataclasses import dataclass

import tempo as tpo
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError

AUTO = "auto"  # a tile size chosen by measurement


@dataclass(frozen=True)
class Attention:
    """``window`` None: causal (``k[0:t+1]``); else the last ``window`` positions
    (``k[max(0, t-window+1):t+1]``). ``tile``: causal attention computed over
    tiles of this static size (``tempo.llm.tiling``), or :data:`AUTO`: of the size
    :func:`tempo.llm.tiling.choose_tile` measures best. ``masked``: causal attention
    over a buffer of one row per new token, carried from step to step with row ``t``
    written at step ``t``, its rows after ``t`` masked: every step has the same shapes
    (:func:`tempo.llm.program.kv_buffer`)."""

    window: int | None = None
    tile: int | str | None = None
    masked: bool = False

    @classmethod
    def parse(cls, spec) -> "Attention":
        """``"causal"``, ``("window", w)`` / ``"window:w"``, ``("tiled", Z)`` / ``"tiled:Z"``
        (causal, in static tiles of ``Z`` positions), ``"tiled"`` (a tile size chosen by
        measurement), ``"masked"`` (causal over a fixed-size buffer) or an Attention."""
        if isinstance(spec, Attention):
            return spec
        if spec == "causal":
            return cls()
        if spec == "masked":
            return cls(masked=True)
        if spec in ("tiled", "tiled:auto", ("tiled", AUTO)):
            return cls(tile=AUTO)
        if isinstance(spec, str) and ":" in spec:
            spec = tuple(spec.split(":", 1))
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] in ("window", "tiled"):
            try:
                width = int(spec[1])
            except (TypeError, ValueError):
                width = 0
            if width >= 1:
                return cls(width) if spec[0] == "window" else cls(tile=width)
        raise TempoError(f"unknown attention spec {spec!r}; use 'causal', ('window', w) / 'window:w', "
                         f"('tiled', Z) / 'tiled:Z' with w, Z >= 1, 'tiled' (Z chosen by measurement) or 'masked'")

    def read(self, x: RT, layer, position) -> RT:
        """``x`` at layer ``layer`` and the positions ``position`` attends to (a leading axis)."""
        if self.window is None:
            return x[layer, 0:position + 1]
        return x[layer, tpo.max(0, position - self.window + 1):position + 1]

    def __str__(self) -> str:
        if self.masked:
            return "masked"
        if self.tile == AUTO:
            return "tiled"
        if self.tile is not None:
            return f"tiled:{self.tile}"
        return "causal" if self.window is None else f"window:{self.window}"
