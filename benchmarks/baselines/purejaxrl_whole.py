"""The whole training run as one ``jax.jit``-ed program, as PureJaxRL's own ``make_train`` compiles it.

PureJaxRL's scripts compile all updates of a run together: the training
loop is a ``lax.scan`` over the updates, so the host launches one program
for the whole run and reads the metrics once at the end. Here that scan
runs the per-iteration function of ``purejaxrl_ppo.py`` or
``purejaxrl_reinforce.py`` (same dynamics, network, initialisation,
hyper-parameters), with the parameters and Adam's state donated to the
program. The iterations' seconds (wall: ``ends``, process CPU:
``ends_cpu``, system CPU: ``ends_sys``) are the run's divided evenly among
them: nothing returns to the host between iterations.
"""
from __future__ import annotations

import resource
import time

import jax
import jax.numpy as jnp
from jax import lax


def make_run(iteration, iterations: int):
    """``(params, adam, key) -> (params, adam, key, returns, losses)``: ``iterations`` calls of
    ``iteration`` under one ``lax.scan``."""
    def run(params, adam, key):
        def update(carry, k):
            params, adam, key = carry
            params, adam, key, mean_return, loss = iteration(params, adam, key, k)
            return (params, adam, key), (mean_return, loss)

        (params, adam, key), (returns, losses) = lax.scan(update, (params, adam, key),
                                                          jnp.arange(iterations, dtype=jnp.int32))
        return params, adam, key, returns, losses

    return run


def train(iteration, iterations: int, params, adam, key) -> dict:
    """Compile the whole run ahead of time, run it once untimed (the first launch's set-up) and once
timed, from the same state; the per-iteration baselines' ``main`` result."""
    params, adam = jax.tree_util.tree_map(jnp.array, (params, adam))  # own buffers (Adam's moments share zeros)
    started = time.perf_counter()
    run = jax.jit(make_run(iteration, iterations), donate_argnums=(0, 1)).lower(params, adam, key).compile()
    compile_s = time.perf_counter() - started
    jax.block_until_ready(run(*jax.tree_util.tree_map(jnp.array, (params, adam)), key))  # a first run, untimed
    start, start_cpu, start_sys = time.perf_counter(), time.process_time(), _system_seconds()
    params, adam, key, returns, losses = jax.block_until_ready(run(params, adam, key))
    end, end_cpu, end_sys = time.perf_counter(), time.process_time(), _system_seconds()
    return {"returns": [float(x) for x in returns], "losses": [float(x) for x in losses], "compile_s": compile_s,
            "start": start, "ends": _evenly(start, end, iterations), "start_cpu": start_cpu,
            "ends_cpu": _evenly(start_cpu, end_cpu, iterations), "start_sys": start_sys,
            "ends_sys": _evenly(start_sys, end_sys, iterations)}


def _system_seconds() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _evenly(start: float, end: float, iterations: int) -> list[float]:
    return [start + (end - start) * (k + 1) / iterations for k in range(iterations)]
