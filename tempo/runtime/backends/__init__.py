"""Execution backends behind one small interface (:mod:`.base`); NumPy is the reference."""
from tempo.runtime.backends.base import Backend, get_backend

__all__ = ["Backend", "get_backend"]
