"""The compiler's settings, in one place: :class:`Config`.

Pass one in code (``ctx.run(bounds, config=tpo.Config(verify=True))``) or let the
environment seed it: a compile given no config reads :meth:`Config.from_env` then.

===================  ===========================  ==========================================
field                environment variable         what it does
===================  ===========================  ==========================================
``passes_off``       ``TEMPO_PASSES_OFF``         passes switched off (``cse,dce``) in every
                                                  compile that does not configure them
``tiles``            ``TEMPO_TILES``              dims tiled (``t:3,l:2``) in every compile
                                                  that does not configure the tiling pass
``verify``           ``TEMPO_VERIFY``             check the SDG after every pass (``1``)
``backend``          ``TEMPO_BACKEND``            the backend of runs that name none
``end_check_every``  ``TEMPO_END_CHECK_EVERY``  steps between host reads of a
                                                  ``tpo.end_when`` flag (unset: chosen
                                                  from measured step and read times)
``step_order``       ``TEMPO_STEP_ORDER``         ``exact``: sums and products over a loop
                                                  dim's steps run in step order on every
                                                  backend and program (``auto``: on NumPy,
                                                  and where a dim ends at run time)
===================  ===========================  ==========================================
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from tempo.errors import TempoError

ENV = {"passes_off": "TEMPO_PASSES_OFF", "tiles": "TEMPO_TILES", "verify": "TEMPO_VERIFY",
       "backend": "TEMPO_BACKEND", "end_check_every": "TEMPO_END_CHECK_EVERY", "step_order": "TEMPO_STEP_ORDER"}
STEP_ORDERS = ("auto", "exact")


@dataclass(frozen=True)
class Config:
    """Settings every compile reads (see the module docstring). ``passes_off``: names of
    :data:`tempo.transforms.PIPELINE`; ``tiles``: dim name -> rows per tile; ``verify``: run
    :func:`tempo.ir.verify.verify` before the first pass and after each; ``backend``: ``numpy``,
    ``torch`` or ``jax`` (with an optional device, ``torch:cuda``), None: ``numpy``;
    ``end_check_every``: read a ``tpo.end_when`` flag on the host every this many steps, None:
    as often as measured step and read times say (:mod:`tempo.runtime.ends`); ``step_order``:
    ``"exact"`` runs every sum and product over a loop dim's steps in step order, so a program
    padded to a cap gives the bits of the same program ended at run time on every backend,
    ``"auto"``: on NumPy always, on torch and JAX where a dim ends at run time
    (:mod:`tempo.transforms.step_order`)."""

    passes_off: tuple[str, ...] = ()
    tiles: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    verify: bool = False
    backend: str | None = None
    end_check_every: int | None = None
    step_order: str = "auto"
    from_environment: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Config:
        """The config the environment variables say (unset: the defaults)."""
        off = environ.get(ENV["passes_off"], "").replace(" ", "")
        return cls(passes_off=tuple(name for name in off.split(",") if name),
                   tiles=MappingProxyType(_tile_sizes(environ.get(ENV["tiles"], "").replace(" ", ""))),
                   verify=environ.get(ENV["verify"], "") not in ("", "0"),
                   backend=environ.get(ENV["backend"]) or None,
                   end_check_every=_positive(ENV["end_check_every"], environ.get(ENV["end_check_every"], "")),
                   step_order=environ.get(ENV["step_order"], "").strip() or "auto",
                   from_environment=True)

    def __post_init__(self) -> None:
        every = self.end_check_every
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise TempoError(f"Config(end_check_every=...) takes a positive int or None, got {every!r}")
        if self.step_order not in STEP_ORDERS:
            raise TempoError(f"{self.named('step_order')} takes {' or '.join(map(repr, STEP_ORDERS))}, "
                             f"got {self.step_order!r}")

    def named(self, setting: str) -> str:
        """How the user spelled ``setting``: its environment variable, or the field of Config."""
        return ENV[setting] if self.from_environment else f"Config({setting}=...)"


def _tile_sizes(text: str) -> dict[str, int]:
    """``TEMPO_TILES=t:3,l:2`` as ``{"t": 3, "l": 2}``."""
    out = {}
    for item in filter(None, text.split(",")):
        name, _, size = item.partition(":")
        if not (name and size.isdigit() and int(size) > 0):
            raise TempoError(f"TEMPO_TILES takes dim:size pairs such as t:64, got {item!r}")
        out[name] = int(size)
    return out


def _positive(name: str, text: str) -> int | None:
    """An environment variable's positive int, or None where it is unset."""
    if not text.strip():
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise TempoError(f"{name} takes a positive int, got {text!r}")
    return int(text)
