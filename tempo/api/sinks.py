"""Sinks: host callbacks that run as part of a program (logging, progress, checkpoints).

A sink is a UDF over the domain of what it reads, registered as a root of the
program: it runs at every point where its inputs are defined, whatever is
fetched. Read a conditional RT (``loss[(i + 1) % 5 == 0]``) to run it only
at some points.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from tempo.api import functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError, user_site
from tempo.ir.ops import STOP_LABEL, StopRun


def sink_many(values: Mapping[str, RT], fn: Callable[[dict, dict], None], label: str = "sink") -> RT:
    """Call ``fn({name: array}, {dim: step})`` at every point of the values' (joint) domain."""
    site = user_site()
    if not values:
        raise TempoError("a sink needs at least one tensor to read", site)
    names = list(values)
    ctx = values[names[0]].ctx
    dims = ctx.order(set().union(*(set(v.domain) for v in values.values())))

    def call(*arrays):
        tensors = dict(zip(names, arrays[:len(names)]))
        point = {d.name: int(c) for d, c in zip(dims, arrays[len(names):])}
        fn(tensors, point)
        return (np.zeros((), dtype=bool),)

    inputs = [values[n] for n in names] + [F.eval_symbol(d) for d in dims]
    out = F.udf(call, inputs, [()], ["bool"], label=label)
    ctx.roots.append(out.node.id)
    return out


def sink(rt: RT, fn: Callable[..., None]) -> RT:
    """``tpo.sink(rt, fn)``: call ``fn(value, point)`` at every point of ``rt`` (``point``: dim name -> step)."""
    return sink_many({"value": rt}, lambda tensors, point: fn(tensors["value"], point))


def stop_when(flag: RT) -> RT:
    """``tpo.stop_when(flag)``: end the run at the first point where every element of ``flag``
    holds. The check at a step of the flag's last dim runs as soon as the flag is known:
    before everything at that step that the flag does not read and everything at the next
    step; nothing scheduled after it runs; fetched tensors hold what was
    computed until then (the points not reached are undefined: NaN or 0), and the program's
    ``stopped_at`` is the point (dim name -> step)."""
    def check(value, point):
        if np.all(value):
            raise StopRun(point)

    return sink_many({"flag": flag}, lambda tensors, point: check(tensors["flag"], point), label=STOP_LABEL)
