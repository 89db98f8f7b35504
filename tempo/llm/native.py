"""The quantised product kernels of ``quantized_kernels.c``, built with this machine's C compiler.

The source is compiled once per machine (``cc -O3 -march=native``: its AVX-512
instructions) into ``$TEMPO_CACHE/kernels`` (default ``~/.cache/tempo``), the
file named by a hash of the source, the compiler command and the CPU's
feature flags, and loaded with ``ctypes``. Where it cannot be built (no C
compiler, no AVX-512), :func:`kernels` returns None and :func:`unavailable`
says why: the products then run with NumPy (:mod:`tempo.llm.quantized`).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quantized_kernels.c")
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC"]
_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {"int8_blocks": [_P, _P, _P, _P, _I, _I, _I, _I],
              "nibble_blocks": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I]}

_loaded: dict = {}


def cache_folder() -> str:
    return os.path.join(os.environ.get("TEMPO_CACHE") or os.path.expanduser("~/.cache/tempo"), "kernels")


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def _library_path(compiler: str) -> str:
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + " ".join([compiler, *FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    return os.path.join(cache_folder(), f"quantized_kernels-{key}.so")


def _build(path: str, compiler: str) -> None:
    """Compile :data:`SOURCE` to ``path``, through a temporary file renamed over it (a process
    that loads ``path`` never sees half a library)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, SOURCE, "-o", tmp], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise OSError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "the compiler failed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def kernels():
    """The loaded kernel library (``int8_blocks``, ``nibble_blocks``), built at the first call;
    None where it cannot be (:func:`unavailable` says why)."""
    if "lib" not in _loaded:
        _loaded["lib"], _loaded["why"] = None, None
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        try:
            if compiler is None:
                raise OSError("no C compiler (cc, gcc or $CC) on the PATH")
            path = _library_path(compiler)
            if not os.path.exists(path):
                _build(path, compiler)
            lib = ctypes.CDLL(path)
            for name, argtypes in SIGNATURES.items():
                getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, None
            _loaded["lib"] = lib
        except (OSError, subprocess.SubprocessError) as err:
            _loaded["why"] = f"the quantised product kernels are not built ({err}); products run with NumPy"
    return _loaded["lib"]


def unavailable() -> str | None:
    """Why :func:`kernels` is None (None when they are loaded)."""
    kernels()
    return _loaded["why"]
