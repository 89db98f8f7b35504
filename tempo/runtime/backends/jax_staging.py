"""JAX's staging of each compiled function, dropped after its compile while Tempo runs a program,
and the memory the compile freed given back to the system.

For every function JAX compiles it keeps the stages that led to the
executable: the traced jaxpr, its pruned and discharged forms and the MLIR
module lowered from them, each in a cache whose entry lives as long as the
entry before it, the first keyed by the jitted function. On CPU that is
about a MiB per compiled function, several times its executable, and a
shift-fused n-step REINFORCE compiles some 90 kernels. The executables live
in each jitted function's own cache, which serves every later call of a
signature it has seen without the staging.

While the backend runs a program (:meth:`JaxBackend.running`), each compile
clears JAX's staging caches (:func:`jax._src.util.clear_all_caches` but the
cache of eager primitives' jitted functions, whose executables would go with
them): a signature not seen before is traced afresh, as it would be anyway,
and nothing seen before compiles again. Outside a run, JAX's caches are left
as they are.

A compile allocates and frees tens of MiB (XLA's passes and LLVM's code
generation: some 25 MiB for an Adam step over a 12288x32 layer on CPU),
spread over the allocator's heaps, where glibc keeps the freed pages resident
for later allocations. After each compile in a run the freed pages go back
to the system (glibc's ``malloc_trim``, where the C library is glibc), so a
process's peak is its live memory and one compile's working set, not every
compile's leftovers: on JAX the Monte-Carlo REINFORCE of ``docs/memory.md``
peaks some 100 MiB lower so. A process that sets glibc's trim threshold
keeps its freed memory as it asks.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

import jax.monitoring
from jax._src import dispatch, util

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_running = 0  # the runs under way (the executor's run and the kernels it makes nest)


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows) or
    the process sets glibc's trim threshold (``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...``,
    ``MALLOC_TRIM_THRESHOLD_``): it asks to keep its freed memory, as ``benchmarks/rl_train.py``
    does so that launches do not fault fresh pages in."""
    if "glibc.malloc.trim_threshold" in os.environ.get("GLIBC_TUNABLES", "") \
            or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return None
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_trim = _malloc_trim()


def _after_compile(event: str, seconds: float, **_) -> None:
    if _running and event == COMPILE_EVENT:
        for cache in list(util._caches):
            if cache is not dispatch.xla_primitive_callable:
                cache.cache_clear()
        if _trim is not None:
            _trim(0)


jax.monitoring.register_event_duration_secs_listener(_after_compile)


@contextlib.contextmanager
def dropped():
    """Inside this context, each compile drops the staging JAX keeps of what it compiled and gives
    the memory it freed back to the system."""
    global _running
    _running += 1
    try:
        yield
    finally:
        _running -= 1
