"""Loop fusion with a shift: a learner in tiles runs inside the loop that produces its input.

isl's scheduler places a loop that reads what another loop produces after it
(acting over ``t``, then the returns and the learner's tiles): correct, but
every value acting produced lives until the learner has run, so tiling the
learner saves nothing while the loop runs. When a later loop of the same
iteration reads only a bounded distance ahead of where the producing loop
is (n-step returns ``r[t:t + n]``, a tile ``k`` of ``Z`` rows reading up to
row ``Z * k + Z + n``), it can run inside that loop, ``s`` steps behind:
statement ``S[k]`` moves to the producing loop's step ``a * k + s`` (``a``
is 1 for a loop over the same dim and ``Z`` for a loop over its tiles), after
the statements the loop already ran at that step. ``s`` is the smallest shift
every dependence allows, computed by isl from the dependences; a loop that
depends on something that stays after the producing loop, or whose shift is
not a constant (it reads the whole of the loop's output: Monte-Carlo returns,
a loss normalised by the whole episode), stays where it was, and so does what
depends on it. Statements of the iteration that depend on nothing the loop
produces (a transposed weight for the backward pass) move before it.

isl's scheduler places statements that depend on nothing the loop over
iterations carries (an environment's reset, its time-only state, the
learning rate of each iteration) ahead of that loop, for every iteration at
once: their points, ``I`` times an iteration's, would all be live before the
first iteration. Each such statement moves into the loop over iterations, at
its own iteration, before that iteration's body (its other loops in their
order), so an iteration holds its own points only and the loop's evictions
and frees release them; one that a statement staying ahead reads stays too.

The result is a flat schedule map (``statement -> time``) checked against every
dependence before it is used; the pass applies to programs the tiling pass
tiled (:attr:`tempo.ir.sdg.SDG.tiles`), whose learners run in tiles along the
dims it fuses.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from tempo.ir.sdg import SDG
from tempo.schedule.isl_expr import CTX
from tempo.symbolic.expr import bound_of


@dataclass
class _Time:
    """A statement's time: per dim, ``(constant, {input dim: coefficient})``."""

    stmt: str
    dims: list[str]  # the statement's own dim names
    parts: list[tuple[int, dict[str, int]]]

    def var_at(self, k: int) -> str | None:
        """The one dim time dim ``k`` is (coefficient 1, no constant), if it is one."""
        const, coefs = self.parts[k]
        return next(iter(coefs)) if const == 0 and len(coefs) == 1 and next(iter(coefs.values())) == 1 else None

    def const_at(self, k: int) -> int | None:
        const, coefs = self.parts[k]
        return None if coefs else const


def apply(sdg: SDG, deps: isl.UnionMap | None, schedule: isl.Schedule | None) -> isl.UnionMap | None:
    """A schedule map with the loops over tiled dims fused into the loop producing their
    input, or None when nothing fuses (or the result would break a dependence)."""
    if not sdg.tiles or deps is None or schedule is None:
        return None
    streams = _streams(sdg)
    times, params = _times(schedule.get_map())
    if times is None:
        return None
    moved = False
    for loop in _producing_loops(times, streams):
        moved |= _fuse(loop, times, streams, deps, params)
    if not moved:
        return None
    _into_iteration_loop(times, deps, params, schedule.get_domain())
    new = _as_map(times, params).intersect_domain(schedule.get_domain())
    return new if _respects(new, deps) else None


def fused(schedule) -> bool:
    """Whether ``schedule`` is one this pass made (a flat schedule map, not isl's schedule tree)."""
    return isinstance(schedule, isl.UnionMap)


def _streams(sdg: SDG) -> dict[str, int]:
    """Dim name -> rows per step of the producing loop: 1 for a tiled dim, ``Z`` for its tiles."""
    by_bound = {bound_of(d).name: d.name for node in sdg.nodes.values() for d in node.domain}
    out = {}
    for tiles, (whole, size) in sdg.tiles.items():
        if whole in by_bound and tiles in by_bound:
            out[by_bound[whole]] = 1
            out[by_bound[tiles]] = size
    return out


def _times(umap: isl.UnionMap) -> tuple[dict[str, _Time] | None, str]:
    times: dict[str, _Time] = {}
    params = ""
    ok = True

    def one(m: isl.Map) -> None:
        nonlocal ok, params
        params = m.get_space().params().to_str().split("->")[0].strip()
        pieces = []
        isl.PwMultiAff.from_map(m).foreach_piece(lambda _, ma: pieces.append(ma))
        name = m.get_tuple_name(isl.dim_type.in_)
        dims = [m.get_space().get_dim_name(isl.dim_type.in_, k) for k in range(m.dim(isl.dim_type.in_))]
        if len(pieces) != 1:
            ok = False
            return
        ma = pieces[0]
        parts = []
        for j in range(ma.dim(isl.dim_type.out)):
            aff = ma.get_aff(j)
            if aff.dim(isl.dim_type.div) or any(aff.get_coefficient_val(isl.dim_type.param, k).to_python()
                                                for k in range(aff.dim(isl.dim_type.param))):
                ok = False
                return
            coefs = {dims[k]: aff.get_coefficient_val(isl.dim_type.in_, k).to_python()
                     for k in range(aff.dim(isl.dim_type.in_))}
            parts.append((aff.get_constant_val().to_python(), {d: c for d, c in coefs.items() if c}))
        times[name] = _Time(name, dims, parts)

    umap.foreach_map(one)
    return (times if ok and times else None), params


@dataclass
class _Loop:
    prefix: tuple  # the time dims before the loop's sequence position, as they are
    level: int  # the position of the sequence number; the loop counter follows it
    position: int
    dim: str


def _producing_loops(times: dict[str, _Time], streams: dict[str, int]) -> list[_Loop]:
    """Per iteration prefix, the first loop over a streamed dim at step 1: the loop producing
    what the later loops read."""
    first: dict[tuple, _Loop] = {}
    for t in times.values():
        for k in range(1, len(t.parts)):
            dim = t.var_at(k)
            position = t.const_at(k - 1)
            if dim is None or position is None or streams.get(dim) != 1:
                continue
            key = (tuple(map(_key, t.parts[:k - 1])), k - 1)
            if key not in first or position < first[key].position:
                first[key] = _Loop(key[0], k - 1, position, dim)
            break
    return list(first.values())


def _key(part: tuple[int, dict]) -> tuple:
    const, coefs = part
    return const, tuple(sorted(coefs.items()))


def _fuse(loop: _Loop, times: dict[str, _Time], streams: dict[str, int], deps: isl.UnionMap,
          params: str) -> bool:
    """Move the statements after ``loop`` in its iteration into it (or before it), a loop of
    them at a time; True when any moved."""
    level = loop.level
    members = [t for t in times.values() if len(t.parts) > level + 2
               and tuple(map(_key, t.parts[:level])) == loop.prefix and t.const_at(level) is not None]
    groups: dict[int, list[_Time]] = {}
    for t in members:
        groups.setdefault(t.const_at(level), []).append(t)
    if loop.position not in groups or not any(streams.get(t.var_at(level + 1), 1) > 1 for t in members):
        return False  # no loop over tiles to bring in
    producers = {t.stmt for t in groups[loop.position]}
    depth = max(t.const_at(level + 2) or 0 for t in groups[loop.position])
    stays: set[str] = set()
    moved = False
    for position in sorted(p for p in groups if p > loop.position):
        group = sorted(groups[position], key=lambda t: [t.const_at(k) or 0 for k in range(level, len(t.parts))])
        names = {t.stmt for t in group}
        sources = set().union(*(_sources(deps, t.stmt, times) for t in group)) - names
        counters = {t.var_at(level + 1) for t in group}
        if sources & stays:
            stays |= names
        elif not sources & producers and counters == {None} and all(t.const_at(level + 1) is not None for t in group):
            for t in group:
                _place(t, level, loop.position - 0.5, None)  # before the loop
            moved = True
        else:
            shift = _group_shift(deps, group, streams, sources & producers, times, level, params)
            if shift is None:
                stays |= names
                continue
            base = depth + 1
            for t in group:
                counter = t.var_at(level + 1)
                _place(t, level, loop.position, (counter, streams[counter], shift, base + t.const_at(level + 2)))
                depth = max(depth, base + t.const_at(level + 2))
            producers |= names
            moved = True
    return moved


def _into_iteration_loop(times: dict[str, _Time], deps: isl.UnionMap, params: str, domain: isl.UnionSet) -> None:
    """Move the statements ahead of the loop over iterations (the outermost loop running the most
    statements) that run over its dim into it, at their own iteration, before its body, where every
    dependence allows (see the module docstring); every time gets one more dim."""
    loops: dict[tuple, int] = {}
    for t in times.values():
        if t.const_at(0) is not None and t.var_at(1) is not None:
            key = (t.const_at(0), t.var_at(1))
            loops[key] = loops.get(key, 0) + 1
    for t in times.values():
        t.parts = t.parts + [(0, {})]
    if not loops:
        return
    position, dim = max(loops, key=loops.get)
    ahead = {t.stmt: t for t in times.values() if t.const_at(0) is not None and t.const_at(0) < position
             and _axis(t, dim) is not None}
    kept = {name: t.parts for name, t in ahead.items()}
    stays: set[str] = set()
    while ahead:
        for t in ahead.values():
            k = _axis(t, dim)
            rest = [p for j, p in enumerate(kept[t.stmt][1:-1], start=1) if j != k]
            t.parts = [(position, {}), (0, {dim: 1}), (t.const_at(0) - position, {})] + rest
        late = _late(deps, _as_map(times, params).intersect_domain(domain))
        if not late & set(ahead):
            return
        stays |= late & set(ahead)
        grown = stays
        while grown:  # what a statement staying ahead reads stays ahead too
            grown = set().union(*(_sources(deps, name, times) & set(kept) for name in grown)) - stays
            stays |= grown
        for name in stays:
            if name in ahead:
                times[name].parts = kept[name]
                del ahead[name]


def _axis(t: _Time, dim: str) -> int | None:
    """The time dim that is ``dim`` in ``t``'s time, when the others are constants or other dims."""
    ks = [k for k, (_, coefs) in enumerate(t.parts) if dim in coefs]
    if len(ks) != 1 or t.var_at(ks[0]) != dim or any(len(coefs) > 1 for _, coefs in t.parts):
        return None
    return ks[0]


def _late(deps: isl.UnionMap, schedule: isl.UnionMap) -> set[str]:
    """The statements on either side of a dependence ``schedule`` does not run in order."""
    out: set[str] = set()

    def check(m: isl.Map) -> None:
        deltas = isl.UnionMap.from_map(m).apply_domain(schedule).apply_range(schedule).deltas()
        if not deltas.is_empty() and not _respects_deltas(deltas):
            out.update((m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)))

    deps.foreach_map(check)
    return out


def _group_shift(deps: isl.UnionMap, group: list[_Time], streams: dict[str, int], sources: set[str],
                 times: dict[str, _Time], level: int, params: str) -> int | None:
    """The one shift for a loop's statements (see :func:`_shift`), or None when they cannot move
    (not one loop over a streamed dim, inner structure, no constant shift)."""
    shift = 0
    for t in group:
        counter = t.var_at(level + 1)
        if streams.get(counter) is None or any(t.const_at(k) is None for k in range(level + 2, len(t.parts))):
            return None
        need = _shift(deps, t, counter, streams[counter], sources, times, level, params)
        if need is None:
            return None
        shift = max(shift, need)
    return shift


def _sources(deps: isl.UnionMap, stmt: str, times: dict[str, _Time]) -> set[str]:
    out = set()
    deps.foreach_map(lambda m: out.add(m.get_tuple_name(isl.dim_type.in_))
                     if m.get_tuple_name(isl.dim_type.out) == stmt else None)
    return out & set(times)


def _place(t: _Time, level: int, position: float, loop: tuple | None) -> None:
    """Rewrite ``t``'s time: sequence number ``position`` (a half: before that loop), and in
    the loop at ``step * counter + shift``, ``order`` within its body."""
    parts = list(t.parts)
    if loop is None and level + 2 < len(parts):
        parts[level + 2] = (parts[level][0], {})  # keeps the order of what moves before the loop
    parts[level] = (position, {})
    if loop is not None:
        counter, step, shift, order = loop
        parts[level + 1] = (shift, {counter: step})
        parts[level + 2] = (order, {})
    t.parts = parts


def _shift(deps: isl.UnionMap, t: _Time, counter: str, step: int, sources: set[str], times: dict[str, _Time],
           level: int, params: str) -> int | None:
    """The smallest ``s`` such that ``t`` at ``step * counter + s`` follows every instance of
    ``sources`` (already in the loop) it reads within one iteration, whatever the bounds; None
    when no constant does."""
    shift = 0
    for src in sources:
        dep = _dep(deps, src, t.stmt)
        if dep is None:
            continue
        before = _affine_map(times[src], list(range(level)) + [level + 1], params)
        sink = _Time(t.stmt, t.dims, t.parts[:level] + [(0, {counter: step})])
        after = _affine_map(sink, list(range(level + 1)), params)
        same = dep.apply_domain(before).apply_range(after).deltas()
        for k in range(level):
            same = same.fix_val(isl.dim_type.set, k, 0)
        if same.is_empty():
            continue
        low = same.min_val(isl.Aff.var_on_domain(isl.LocalSpace.from_space(same.get_space()), isl.dim_type.set,
                                                 level))
        if not low.is_int():
            return None
        shift = max(shift, -low.to_python())
    return shift


def _dep(deps: isl.UnionMap, src: str, sink: str) -> isl.Map | None:
    found = []
    deps.foreach_map(lambda m: found.append(m) if m.get_tuple_name(isl.dim_type.in_) == src
                     and m.get_tuple_name(isl.dim_type.out) == sink else None)
    if not found:
        return None
    out = found[0]
    for m in found[1:]:
        out = out.union(m)
    return out


def _expr(part: tuple) -> str:
    const, coefs = part
    terms = [f"{c}*{d}" for d, c in coefs.items()] + [str(const)]
    return " + ".join(terms)


def _affine_map(t: _Time, dims: list[int], params: str) -> isl.Map:
    outs = ", ".join(_expr(t.parts[k]) for k in dims)
    return isl.Map.read_from_str(CTX, f"{params} -> {{ {t.stmt}[{', '.join(t.dims)}] -> [{outs}] }}")


def _as_map(times: dict[str, _Time], params: str) -> isl.UnionMap:
    """The times as one schedule map; halves (a place before a loop) become integers by doubling."""
    out, halves = None, _sequence_dims(times)
    for t in times.values():
        parts = [(int(round(2 * c)), {d: 2 * v for d, v in coefs.items()}) if k in halves else
                 (c, coefs) for k, (c, coefs) in enumerate(t.parts)]
        m = isl.UnionMap.from_map(_affine_map(_Time(t.stmt, t.dims, parts), list(range(len(parts))), params))
        out = m if out is None else out.union(m)
    return out


def _sequence_dims(times: dict[str, _Time]) -> set[int]:
    """Time dims some statement has a non-integer constant at."""
    return {k for t in times.values() for k, (c, coefs) in enumerate(t.parts) if not coefs and c != int(c)}


def _respects(schedule: isl.UnionMap, deps: isl.UnionMap) -> bool:
    """Whether every dependence runs its source strictly before its sink under ``schedule``."""
    return _respects_deltas(deps.apply_domain(schedule).apply_range(schedule).deltas())


def _respects_deltas(deltas: isl.UnionSet) -> bool:
    """Whether every difference of times in ``deltas`` is lexicographically positive."""
    ok = True

    def check(s: isl.Set) -> None:
        nonlocal ok
        positive = isl.Map.lex_lt(s.get_space()).deltas()
        ok = ok and s.is_subset(positive)

    deltas.foreach_set(check)
    return ok
