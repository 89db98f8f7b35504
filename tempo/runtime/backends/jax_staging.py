"""JAX's staging of each compiled function, dropped after its compile while Tempo runs a program.

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
"""
from __future__ import annotations

import contextlib

import jax.monitoring
from jax._src import dispatch, util

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_running = 0  # the runs under way (the executor's run and the kernels it makes nest)


def _after_compile(event: str, seconds: float, **_) -> None:
    if _running and event == COMPILE_EVENT:
        for cache in list(util._caches):
            if cache is not dispatch.xla_primitive_callable:
                cache.cache_clear()


jax.monitoring.register_event_duration_secs_listener(_after_compile)


@contextlib.contextmanager
def dropped():
    """Inside this context, each compile drops the staging JAX keeps of what it compiled."""
    global _running
    _running += 1
    try:
        yield
    finally:
        _running -= 1
