"""Which keys and values a position attends to: causal or a sliding window."""
from __future__ import annotations

from dataclasses import dataclass

import tempo as tpo
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError


@dataclass(frozen=True)
class Attention:
    """``window`` None: causal (``k[0:t+1]``); else the last ``window`` positions
    (``k[max(0, t-window+1):t+1]``)."""

    window: int | None = None

    @classmethod
    def parse(cls, spec) -> "Attention":
        """``"causal"``, ``("window", w)``, ``"window:w"`` or an Attention."""
        if isinstance(spec, Attention):
            return spec
        if spec == "causal":
            return cls()
        if isinstance(spec, str) and spec.startswith("window:"):
            spec = ("window", spec[len("window:"):])
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] == "window":
            try:
                width = int(spec[1])
            except (TypeError, ValueError):
                width = 0
            if width >= 1:
                return cls(width)
        raise TempoError(f"unknown attention spec {spec!r}; use 'causal', ('window', w) or 'window:w' "
                         f"with w >= 1")

    def read(self, x: RT, layer, position) -> RT:
        """``x`` at layer ``layer`` and the positions ``position`` attends to (a leading axis)."""
        if self.window is None:
            return x[layer, 0:position + 1]
        return x[layer, tpo.max(0, position - self.window + 1):position + 1]

    def __str__(self) -> str:
        return "causal" if self.window is None else f"window:{self.window}"
