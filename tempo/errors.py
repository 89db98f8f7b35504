"""One error hierarchy: every user-facing error is a :class:`TempoError`.

Errors about a recurrent tensor name the user's source line that created it
(its *site*), so a bad program points back at the user's own code.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Site:
    """Where in the user's code something was created."""

    filename: str
    lineno: int
    code: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: {self.code}".rstrip(": ")


def user_site() -> Site | None:
    """The innermost stack frame outside the tempo package."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        path = filename if os.path.isabs(filename) else os.path.abspath(filename)
        if _users(path):
            return Site(filename, frame.f_lineno, _source_line(os.path.normpath(path), frame.f_lineno))
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=1024)
def _users(path: str) -> bool:
    """Whether the code at ``path`` is the user's: outside the tempo package and importlib (asked for
    every frame up to the user's at every op a program builds)."""
    path = os.path.normpath(path)
    return not path.startswith(_PACKAGE_DIR) and "importlib" not in path


def _source_line(filename: str, lineno: int) -> str:
    import linecache

    return linecache.getline(filename, lineno).strip()


class TempoError(Exception):
    """Base class of every error Tempo raises for a bad program or bad input."""

    def __init__(self, message: str, site: Site | None = None):
        self.problem = message
        self.site = site
        super().__init__(message if site is None else f"{message}\n  defined at {site}")


class ShapeError(TempoError):
    """Spatial shapes or dtypes that do not fit together."""


class DomainError(TempoError):
    """A temporal index or domain that is not valid."""


class DefinitionError(TempoError):
    """A branching recurrent tensor defined badly (gaps, bad keys)."""


class ScheduleError(TempoError):
    """A program no schedule can execute."""


class BoundError(TempoError):
    """A bound symbol missing or invalid at run time."""
