"""C sources built with this machine's C compiler and loaded with ``ctypes``.

A source is compiled once per machine (``cc -O3 -march=native``) into
``$TEMPO_CACHE/kernels`` (default ``~/.cache/tempo``), the file named by a hash
of the source, the compiler command and the CPU's feature flags. Where it
cannot be built (no C compiler, or the compiler refuses the source),
:func:`load` raises :class:`OSError` saying why, and the caller runs its NumPy
code instead.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile

FLAGS = ["-O3", "-march=native", "-shared", "-fPIC"]


def cache_folder() -> str:
    return os.path.join(os.environ.get("TEMPO_CACHE") or os.path.expanduser("~/.cache/tempo"), "kernels")


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def _text_with_includes(source: str) -> bytes:
    """``source``'s bytes followed by those of the files it includes by a quoted name (``#include
    "x.h"``, beside it): a change to either builds it again."""
    with open(source, "rb") as f:
        text = f.read()
    folder = os.path.dirname(source)
    included = re.findall(rb'^#include "([^"]+)"', text, re.MULTILINE)
    return text + b"".join(_text_with_includes(os.path.join(folder, name.decode())) for name in included)


def library_path(source: str, compiler: str) -> str:
    """Where ``source`` compiled by ``compiler`` for this CPU is kept (named by a hash of it, the
    files it includes, the compiler command and the CPU's flags)."""
    text = _text_with_includes(source)
    key = hashlib.sha256(text + " ".join([compiler, *FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    name = os.path.splitext(os.path.basename(source))[0]
    return os.path.join(cache_folder(), f"{name}-{key}.so")


def _build(source: str, path: str, compiler: str) -> None:
    """Compile ``source`` to ``path``, through a temporary file renamed over it (a process that
    loads ``path`` never sees half a library)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, source, "-o", tmp], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise OSError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "the compiler failed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(source: str, signatures: dict) -> ctypes.CDLL:
    """``source`` built (at the first call on this machine) and loaded, each function of
    ``signatures`` (name -> argument types) declared returning nothing. Raises :class:`OSError`
    saying why where it cannot be built."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or $CC) on the PATH")
    path = library_path(source, compiler)
    try:
        if not os.path.exists(path):
            _build(source, path, compiler)
    except subprocess.SubprocessError as err:
        raise OSError(str(err)) from None
    lib = ctypes.CDLL(path)
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, None
    return lib


class Kernels:
    """A source's kernels, built and loaded at their first use. :meth:`library` is the loaded
    library, or None where it cannot be built; :meth:`unavailable` then says why, naming the
    kernels (``what``) and what runs in their place (``instead``)."""

    def __init__(self, source: str, signatures: dict, what: str, instead: str):
        self.source, self.signatures, self.what, self.instead = source, signatures, what, instead
        self.loaded: dict = {}

    def library(self) -> ctypes.CDLL | None:
        if "lib" not in self.loaded:
            self.loaded["lib"], self.loaded["why"] = None, None
            try:
                self.loaded["lib"] = load(self.source, self.signatures)
            except OSError as err:
                self.loaded["why"] = f"{self.what} not built ({err}); {self.instead}"
        return self.loaded["lib"]

    def unavailable(self) -> str | None:
        """Why :meth:`library` is None (None when it is loaded)."""
        self.library()
        return self.loaded["why"]
