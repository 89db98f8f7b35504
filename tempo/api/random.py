"""Random recurrent tensors (``tpo.random``), from a counter-based generator.

A random RT's value at a point depends only on the context seed (and
replica, under ``tpo.data_parallel``), the RT's stream (its creation order in
the program) and the point (shifted by the context's ``start``), so it is the same
whatever the schedule, the backend or how a dim is vectorized.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tempo.api.context import current
from tempo.api.rt import RecurrentTensor, apply
from tempo.errors import ShapeError, user_site
from tempo.ir import ops
from tempo.ir.dtypes import dtype_name
from tempo.symbolic.expr import Expr


def _draw(dist: str, shape, dims: Sequence[Expr], dtype: str) -> RecurrentTensor:
    ctx, site = current(), user_site()
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    dtype = dtype_name(dtype, site)
    if np.dtype(dtype).kind != "f":
        raise ShapeError(f"random tensors are floating point, not {dtype}", site)
    ordered = ctx.order(dims)
    op = ops.RandomOp(shape, dtype, dist, ctx.sample_stream(), ordered,
                      tuple(ctx.offset(d) for d in ordered))
    return apply(op, [], site=site, ctx=ctx)


def uniform(shape=(), dims: Sequence[Expr] = (), low: float = 0.0, high: float = 1.0,
            dtype: str = "float32") -> RecurrentTensor:
    """Uniform numbers on ``[low, high)``, independent at every point of ``dims``."""
    u = _draw("uniform", shape, dims, dtype)
    return u if (low, high) == (0.0, 1.0) else u * (high - low) + low


def normal(shape=(), dims: Sequence[Expr] = (), mean: float = 0.0, std: float = 1.0,
           dtype: str = "float32") -> RecurrentTensor:
    """Normal numbers, independent at every point of ``dims``."""
    z = _draw("normal", shape, dims, dtype)
    return z if (mean, std) == (0.0, 1.0) else z * std + mean
