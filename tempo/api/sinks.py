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
from tempo.ir.ends import END_LABEL
from tempo.ir.ops import STOP_LABEL, StopRun, UDFOp


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
    step, except the sinks and checkpoints that read nothing else at that step (they report the
    step that stops the run); nothing scheduled after it runs; fetched tensors hold what was
    computed until then (the points not reached are undefined: NaN or 0), and the program's
    ``stopped_at`` is the point (dim name -> step)."""
    def check(value, point):
        if np.all(value):
            raise StopRun(point)

    return sink_many({"flag": flag}, lambda tensors, point: check(tensors["flag"], point), label=STOP_LABEL)


def end_when(flag: RT) -> RT:
    """``tpo.end_when(flag)``: the last dim of ``flag``'s domain, ``t``, ends at the first step where
    every element of ``flag`` holds, once per point of ``flag``'s other dims (``i``): ``T[i]`` is
    that step plus one, capped by the bound the run gives ``T``. Everything over ``t`` exists for
    ``0 <= t < T[i]``: ``x[i, 0:T]``, ``r[i, t:T]`` and sums over ``t`` see exactly those steps, and
    the loop over ``t`` exits where the flag first holds (docs/api.md, "Dims that end at run time")."""
    site = user_site()
    if not isinstance(flag, RT):
        raise TempoError(f"tpo.end_when takes a recurrent tensor, got {type(flag).__name__}", site)
    if not flag.domain:
        raise TempoError("tpo.end_when's flag varies over no dim: it has no dim to end", site)
    dim = flag.domain[-1]
    taken = [n for n, node in flag.ctx.sdg.nodes.items()
             if isinstance(node.op, UDFOp) and node.op.label == END_LABEL and node.domain[-1] is dim]
    if taken:
        raise TempoError(f"dim {dim.name} already ends at a tpo.end_when "
                         f"(at {flag.ctx.sdg.nodes[taken[0]].site})", site)
    out = F.udf(lambda value: (np.asarray(np.all(value)),), [flag], [()], ["bool"], label=END_LABEL)
    flag.ctx.roots.append(out.node.id)
    return out
