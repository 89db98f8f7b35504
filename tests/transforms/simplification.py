"""Helpers of the simplification passes' tests: a program compiled with and without passes."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.transforms import SIMPLIFICATION

NONE = {name: False for name in SIMPLIFICATION}  # no simplification pass
PLAIN = {**NONE, "lift": False, "vectorize": False, "contract": False, "fuse": False}  # the program as built, point by point


def compiled(build, passes: dict, bounds: dict, seed: int = 0):
    """``build(ctx) -> fetch`` compiled with ``passes`` and run at ``bounds`` (by bound name)."""
    with tpo.Context(seed=seed) as ctx:
        fetch = build(ctx)
        program = ctx.compile(fetch, passes=passes)
        named = {b: bounds[b.name] for d in ctx.dim_order for b in [tpo.symbolic.bound_of(d)] if b.name in bounds}
        return program, program.run(named)


def same_results(got, want, exact: bool = True) -> None:
    for x, y in zip(got, want, strict=True):
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def stat(program, name: str):
    """The program's :class:`~tempo.transforms.PassStat` of pass ``name``."""
    return next(s for s in program.pass_stats if s.name == name)


def ops_of(program, op_type) -> list:
    return [n for n in program.sdg.nodes.values() if isinstance(n.op, op_type)]
