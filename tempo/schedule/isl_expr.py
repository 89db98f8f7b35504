"""Translation of symbolic expressions into isl's Presburger syntax.

This module and :mod:`tempo.schedule.isl_schedule` are the only places that
speak isl. Statements are named sets over the steps of an operator's domain;
bound symbols (``T``) are isl parameters, constrained to ``T >= 1``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import islpy as isl

from tempo.symbolic.expr import Expr
from tempo.symbolic.simplify import simplify

_CMP = {"lt": "<", "le": "<=", "eq": "=", "ne": "!="}

CTX = isl.Context()
# Schedule each strongly connected component of the dependence graph on its own:
# programs with autodiff have hundreds of statements, and the whole-graph ILP is
# ~6x slower on them (2.4 s instead of 13.5 s for a 650-node REINFORCE program).
CTX.set_schedule_serialize_sccs(1)
# Feautrier's algorithm (carry as many dependences as possible per schedule
# dimension) instead of isl's proximity-optimising default: on the same
# programs it finds schedules with the same results, per-iteration time and
# memory, and compiles 2-5x faster (REINFORCE: first iteration 4.1 s instead
# of 8.0 s; A2C, 2 iterations: 6.4 s instead of 30.1 s, peak RSS 0.58 instead
# of 1.13 GB).
CTX.set_schedule_algorithm(1)


def aff(e: Expr) -> str:
    """An isl (piecewise) affine expression for an arithmetic ``e``."""
    op = e.op
    if op == "const":
        return str(int(e.args[0]))
    if op == "sym":
        return e.args[0]
    if op == "add":
        return f"({aff(e.args[0])} + {aff(e.args[1])})"
    if op == "mul":
        return f"({aff(e.args[0])} * {aff(e.args[1])})"
    if op == "floordiv":
        return f"floor(({aff(e.args[0])}) / {aff(e.args[1])})"
    if op == "mod":
        return f"(({aff(e.args[0])}) mod {aff(e.args[1])})"
    if op in ("min", "max"):
        out = aff(e.args[0])
        for a in e.args[1:]:
            out = f"{op}({out}, {aff(a)})"
        return out
    raise ValueError(f"{e} is not an arithmetic expression")


def cond(e: Expr) -> str:
    """An isl constraint for a boolean ``e``."""
    op = e.op
    if op == "const":
        return "1 = 1" if e.args[0] else "1 = 0"
    if op in _CMP:
        return f"{aff(e.args[0])} {_CMP[op]} {aff(e.args[1])}"
    if op in ("and", "or"):
        return f"(({cond(e.args[0])}) {op} ({cond(e.args[1])}))"
    if op == "not":
        return f"(not ({cond(e.args[0])}))"
    raise ValueError(f"{e} is not a boolean expression")


def params_of(exprs: Sequence[Expr]) -> list[str]:
    names = set()
    for e in exprs:
        names |= {s.name for s in e.free_symbols() if s.kind == "bound"}
    return sorted(names)


def _prefix(params: Sequence[str]) -> str:
    return f"[{', '.join(params)}] -> " if params else ""


def box(dims: Sequence[Expr]) -> list[str]:
    """The constraints ``0 <= t < T`` of each step symbol in ``dims``."""
    from tempo.symbolic.expr import bound_of

    return [f"0 <= {d.name} < {bound_of(d).name}" for d in dims]


def domain_set(name: str, dims: Sequence[Expr], where: Expr | None = None,
               params: Sequence[str] = ()) -> isl.Set:
    """``{ name[dims] : 0 <= dims < bounds and where }`` as an isl set."""
    return _domain_set(tuple(dims), where, tuple(params)).set_tuple_name(name)


@lru_cache(maxsize=4096)
def _domain_set(dims: tuple[Expr, ...], where: Expr | None, params: tuple[str, ...]) -> isl.Set:
    """:func:`domain_set` under a placeholder name: programs repeat a few shapes of set many
    times, and parsing isl's syntax is most of the cost of building one."""
    from tempo.symbolic.expr import bound_of

    constraints = box(dims) + ([cond(simplify(where))] if where is not None else [])
    all_params = sorted(set(params) | {bound_of(d).name for d in dims}
                        | set(params_of([where] if where is not None else [])))
    body = " and ".join(constraints) if constraints else "1 = 1"
    text = f"{_prefix(all_params)}{{ S[{', '.join(d.name for d in dims)}] : {body} }}"
    return isl.Set.read_from_str(CTX, text)


def access_map(sink: str, sink_dims: Sequence[Expr], src: str, src_dims: Sequence[Expr],
               index: Expr, where: Expr | None = None, params: Sequence[str] = (),
               src_box: bool = True) -> isl.Map:
    """The dependence ``sink[p] -> src[q]`` for ``q in index(p)``, inside both boxes.

    ``index`` is a ``seq`` with one point or slice per source dimension, over
    the sink's step symbols. With ``src_box=False`` the reads are not clipped
    to the source's box (to find reads outside it).
    """
    template = _access_map(tuple(sink_dims), tuple(src_dims), index, where, tuple(params), src_box)
    return template.set_tuple_name(isl.dim_type.in_, sink).set_tuple_name(isl.dim_type.out, src)


@lru_cache(maxsize=4096)
def _access_map(sink_dims: tuple[Expr, ...], src_dims: tuple[Expr, ...], index: Expr, where: Expr | None,
                params: tuple[str, ...], src_box: bool) -> isl.Map:
    """:func:`access_map` between placeholder names (see :func:`_domain_set`)."""
    from tempo.symbolic.expr import bound_of

    out_names = [f"{d.name}__src" for d in src_dims]
    constraints = box(sink_dims)
    if src_box:
        constraints += [f"0 <= {n} < {bound_of(d).name}" for n, d in zip(out_names, src_dims)]
    for n, item in zip(out_names, index.args):
        item = simplify(item)
        if item.op == "slice":
            constraints.append(f"{aff(item.args[0])} <= {n} < {aff(item.args[1])}")
        else:
            constraints.append(f"{n} = {aff(item)}")
    if where is not None:
        constraints.append(cond(simplify(where)))
    exprs = [index] + list(sink_dims) + list(src_dims) + ([where] if where is not None else [])
    params = sorted(set(params) | set(params_of(exprs)) | {bound_of(d).name for d in [*sink_dims, *src_dims]})
    text = (f"{_prefix(params)}{{ S[{', '.join(d.name for d in sink_dims)}] -> "
            f"R[{', '.join(out_names)}] : {' and '.join(constraints) or '1 = 1'} }}")
    return isl.Map.read_from_str(CTX, text)
