"""Memory statements scheduled with the computation (TEMPO §5.2, Fig. 15): deallocations
(Fig. 15a) here, and the evicts and loads of :mod:`tempo.schedule.isl_swap` (Fig. 15b).

Each tensor :func:`tempo.schedule.memory.deallocations` frees becomes a
statement ``F<n>`` (``F<n>_<j>`` for some of its outputs) over the points it
frees, a subset of the producer's domain: ``F<n>[p]`` deallocates point ``p``.
Its dependences are Fig. 15a's: the producer's identity dependence
(``S<n>[p]`` before ``F<n>[p]``) and, through the inverse of every read
access, each reader instance ``S<r>[q]`` that reads ``p`` before
``F<n>[p]`` (and, where a reader hands on a view of what it read, the
statement holding that view). Proximity asks for the free as early as those
dependences allow: right after the last of them.

The computation's schedule comes first and stays as it is: the memory
statements must not change the order of the computation, and isl's
scheduler cannot hold part of a schedule fixed (a second
``compute_schedule`` over computation and frees would schedule the
computation anew). So each free is placed from its dependences over the
computed schedule: isl's ``lexmax`` over the times of the instances it
waits for gives, for every point, the last of them, and the free runs right
after it. Where the last statement differs between points (a reader one
step ahead stops at the loop's last step), the free runs after the place in
the loop body of the one statement that follows every dependence (checked
with isl), so it needs no branch per statement:

* on isl's schedule tree, the frees placed after a statement of one leaf
  are grafted after that leaf as an extension node (``graft_after``) that
  maps the leaf's prefix schedule (the iteration of the loops around it) to
  the points freed there; isl's AST generator scans them with the
  computation, and the statements' order in the tree does not change;
  the loads of a leaf's instances are grafted before it (``graft_before``),
  its evicts after it and before its frees;
* on a flat schedule map (:mod:`tempo.schedule.shift_fusion`'s times), every
  time gets one more dimension, 0 for a load, 1 for the computation, 2 for
  an evict and 3 for a free, and a memory statement's time is that of the
  instance it precedes or follows with its value.

A free of the rows a tile read is scanned as a loop over those rows, which
:func:`tempo.schedule.memory.batch_frees` turns into one free of a slice.
Either way isl's AST holds the memory statements where the schedule puts
them, and :func:`tempo.schedule.isl_schedule.to_tempo_ast` turns them into
:class:`~tempo.schedule.ast.Free`, :class:`~tempo.schedule.ast.Evict` and
:class:`~tempo.schedule.ast.Load` statements.
"""
from __future__ import annotations

import islpy as isl

from tempo.ir.sdg import SDG
from tempo.schedule import isl_swap, swap_passes
from tempo.schedule.isl_domains import Domains, executed_reads, statement
from tempo.schedule.isl_schedule import as_map, build_ast, free_statement
from tempo.schedule.memory import Dealloc, batch_frees


def with_memory(sdg: SDG, d: Domains, schedule: isl.Schedule | isl.UnionMap, deallocs: list[Dealloc],
                swapped: set[tuple[int, int]] = frozenset(), times: isl.UnionMap | None = None
                ) -> isl.Schedule | isl.UnionMap:
    """``schedule`` (a schedule tree or a flat map) with a free statement per entry of
    ``deallocs``, each point freed right after the last statement instance depending on it, and
    the evicts and loads of the ``swapped`` tensors (:mod:`tempo.schedule.isl_swap`). ``times``:
    ``schedule`` as a flat map (:func:`tempo.schedule.isl_schedule.as_map`), where the caller has it."""
    times = as_map(schedule) if times is None else times
    loads, evicts = isl_swap.placements(sdg, d, times, swapped)
    frees = _frees(sdg, d, times, deallocs)
    if loads is None and evicts is None and frees is None:
        return schedule
    if isinstance(schedule, isl.UnionMap):  # in one time: the loads, the computation, the evicts, the frees
        out = _appended(times, 1)
        for placed, value in ((loads, 0), (evicts, 2), (frees, 3)):
            if placed is not None:
                out = out.union(_appended(placed.apply_range(_extended(times)), value))
        return out
    return _grafted(schedule, loads, [evicts, frees])


def _frees(sdg: SDG, d: Domains, times: isl.UnionMap, deallocs: list[Dealloc]) -> isl.UnionMap | None:
    """Each free instance -> the instance it runs right after (the last it waits for)."""
    deps = reach = None
    for dealloc in deallocs:
        dep = dependences(sdg, d, dealloc)
        if dep is not None:
            deps = dep if deps is None else deps.union(dep)
            boxed = dependences(sdg, d, dealloc, boxed=True)
            reach = boxed if reach is None else reach.union(boxed)
    if deps is None:
        return None
    freed_by = deps.reverse()  # free instance -> the instances it waits for
    last = freed_by.apply_range(times).lexmax()
    pieces = _by_statement(freed_by.intersect(last.apply_range(times.reverse())))
    return _joined(pieces, freed_by, reach.reverse(), times)


def _joined(pieces: isl.UnionMap, freed_by: isl.UnionMap, reach: isl.UnionMap, times: isl.UnionMap) -> isl.UnionMap:
    """``pieces`` with the pieces of each free joined into one where that is valid: every point
    freed after the place in the loop body of one piece's statement, also where that statement
    does not run (the last step of a loop, where a reader reading one step ahead stops), so
    the free runs under its own condition only instead of one branch per statement."""
    by_free: dict[str, list[isl.Map]] = {}
    pieces.foreach_map(lambda m: by_free.setdefault(_free_of(m), []).append(m))
    out = None
    for name, maps in by_free.items():
        joined = _one_piece(name, maps, freed_by, reach, times) if len(maps) > 1 else None
        for m in [joined] if joined is not None else maps:
            out = isl.UnionMap.from_map(m) if out is None else out.union(isl.UnionMap.from_map(m))
    return out


def _one_piece(name: str, maps: list[isl.Map], freed_by: isl.UnionMap, reach: isl.UnionMap,
               times: isl.UnionMap) -> isl.Map | None:
    """The free ``name``'s points all placed at one of its pieces' statements (see :func:`_joined`),
    or None when no piece's place follows every instance the free waits for. ``reach``: free ->
    the instances of each statement's box that would read the point (executed or not)."""
    points = None
    for m in maps:
        p = m.domain().set_tuple_name(name)
        points = p if points is None else points.union(p)
    waits = freed_by.intersect_domain(isl.UnionSet.from_set(points)).apply_range(times)
    reads: list[isl.Map] = []
    reach.intersect_domain(isl.UnionSet.from_set(points)).foreach_map(reads.append)
    for m in maps:  # at the point of its loop body where m's statement runs, at the readers' point
        at = m.get_tuple_name(isl.dim_type.out)
        for readers in ([r for r in reads if r.get_tuple_name(isl.dim_type.out) == at],
                        [r for r in reads if r.dim(isl.dim_type.out) == m.dim(isl.dim_type.out)]):
            everywhere = _renamed_union(readers, at)
            if everywhere is None or everywhere.is_empty() or not everywhere.is_single_valued() or \
                    not everywhere.domain().is_equal(isl.UnionSet.from_set(points)):
                continue
            if _not_before(waits, everywhere.apply_range(_extended(times))):
                return isl.Map.from_union_map(everywhere)
    return None


def _renamed_union(reads: list[isl.Map], at: str) -> isl.UnionMap | None:
    """The union of ``reads`` (free -> reader instance), each reader renamed ``at``: the place in
    the loop body where ``at`` runs, at the reader's point (its own reads first, where it reads
    every point freed: a learner's tile also where that tile does not run)."""
    out = None
    for r in reads:
        r = isl.UnionMap.from_map(r.set_tuple_name(isl.dim_type.out, at))
        out = r if out is None else out.union(r)
    return out


def _not_before(waits: isl.UnionMap, at: isl.UnionMap) -> bool:
    """Whether, for every free instance, ``at``'s time is no earlier than any time of ``waits``."""
    pairs = at.reverse().apply_range(waits)  # the free's time -> the times it waits for
    if pairs.is_empty():
        return True
    space = pairs.range().get_set_list().get_at(0).get_space()
    return pairs.is_subset(isl.UnionMap.from_map(isl.Map.lex_ge(space)))


def _free_of(m: isl.Map) -> str:
    """The name of the free statement whose piece ``m`` is: ``F<n>_0...``."""
    node_id, _, *outputs = (int(part) for part in m.get_tuple_name(isl.dim_type.in_)[1:].split("_"))
    return free_statement(node_id, tuple(outputs))


def _extended(times: isl.UnionMap) -> isl.UnionMap:
    """Each statement's time as a function of its dims beyond its domain (the place in its loop
    body where it would run)."""
    maps: list[isl.Map] = []
    times.foreach_map(maps.append)
    out = None
    for m in maps:
        m = isl.UnionMap.from_map(m.gist_domain(m.domain()))
        out = m if out is None else out.union(m)
    return out


def dependences(sdg: SDG, d: Domains, dealloc: Dealloc, boxed: bool = False) -> isl.UnionMap | None:
    """``S[q] -> F[p]``: every instance that must run before point ``p`` is freed (Fig. 15a).

    ``boxed``: the readers only, with the instances of their boxes, executed or not (where
    each would read ``p``)."""
    name = free_statement(dealloc.node, dealloc.outputs)
    runs = d.box if boxed else d.executed

    def to_free(reads: isl.Map) -> isl.UnionMap:  # reader[q] -> source[p], as reader[q] -> F[p]
        return isl.UnionMap.from_map(reads.set_tuple_name(isl.dim_type.out, name))

    def reads(k: int) -> isl.Map:
        return executed_reads(sdg, d, k, runs).intersect_range(runs[sdg.edges[k].src])

    freed = None
    for k in dealloc.edges:
        points = reads(k).range().intersect(d.executed[dealloc.node])
        freed = points if freed is None else freed.union(points)
    if dealloc.unread and freed is not None:
        freed = d.executed[dealloc.node]
    if freed is None or freed.is_empty():
        return None
    freed_at = isl.UnionSet.from_set(freed.set_tuple_name(name))
    producer = isl.Map.identity(freed.get_space().map_from_set()).intersect_domain(freed)
    deps = to_free(producer.subtract(producer) if boxed else producer)
    for k, e in enumerate(sdg.edges):
        if e.src == dealloc.node and e.sink_in >= 0 and (not dealloc.outputs or e.src_out in dealloc.outputs):
            deps = deps.union(to_free(reads(k)))
    if dealloc.holder is not None and not boxed:  # the holder at the reader's own point holds a view of what it read
        (k,) = dealloc.edges
        held = reads(k).set_tuple_name(isl.dim_type.in_, statement(dealloc.holder))
        deps = deps.union(to_free(held.intersect_domain(runs[dealloc.holder])))
    return deps.intersect_range(freed_at)


def _by_statement(last: isl.UnionMap) -> isl.UnionMap:
    """``last`` (free -> the last instances it waits for) with each free split into one piece
    per statement that runs last at some of its points (``F<n>_<piece>``): a piece's time is
    that statement's, one affine time and one place in a loop body."""
    maps: list[isl.Map] = []
    last.foreach_map(maps.append)
    out, taken = None, {}
    for m in sorted(maps, key=lambda m: (m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))):
        name = m.get_tuple_name(isl.dim_type.in_)
        piece, earlier = taken.get(name, (0, None))
        if earlier is not None:  # freed after an instance of an earlier piece's statement too
            m = m.subtract_domain(earlier)
        if m.is_empty():
            continue
        taken[name] = (piece + 1, m.domain() if earlier is None else earlier.union(m.domain()))
        node_id, _, *outputs = (int(part) for part in name[1:].split("_"))
        m = m.set_tuple_name(isl.dim_type.in_, free_statement(node_id, tuple(outputs), piece))
        out = isl.UnionMap.from_map(m) if out is None else out.union(isl.UnionMap.from_map(m))
    return out


def _appended(times: isl.UnionMap, value: int) -> isl.UnionMap:
    """``times`` with one more time dimension, equal to ``value``."""
    ctx = times.get_ctx()
    at = isl.UnionSet.read_from_str(ctx, f"{{ [{value}] }}").align_params(times.get_space())
    return times.flat_range_product(isl.UnionMap.from_domain_and_range(times.domain(), at))


def _grafted(schedule: isl.Schedule, before: isl.UnionMap | None, afters: list) -> isl.Schedule:
    """``schedule`` with each instance of ``before`` (statement -> the instance it precedes)
    grafted right before the leaf holding that instance, and those of each of ``afters``
    (statement -> the instance it follows) right after it, in the order of ``afters``, each at
    that instance's prefix schedule (a free may follow an instance that does not run: the
    leaf's statements, not its executed instances, decide where it goes)."""
    grafts, left = [], [before, *afters]
    for path, leaf in _leaves(schedule.get_root()):
        here = [None if placed is None else placed.intersect_range(leaf.get_universe_domain()) for placed in left]
        if all(h is None or h.is_empty() for h in here):
            continue
        left = [placed if h is None else placed.subtract_domain(h.domain()) for placed, h in zip(left, here)]
        prefix = _extended(leaf.get_prefix_schedule_union_map())
        grafts.append((path, [None if h is None or h.is_empty() else h.apply_range(prefix).reverse() for h in here]))
    for path, (first, *then) in reversed(grafts):  # the later leaves first: the earlier paths stay valid
        node = schedule.get_root()
        for k in path:
            node = node.child(k)
        for extension in reversed(then):  # each grafted right after the leaf: the last one first
            if extension is not None:
                node = node.graft_after(isl.ScheduleNode.from_extension(extension))
        if first is not None:
            node = node.graft_before(isl.ScheduleNode.from_extension(first))
        schedule = node.get_schedule()
    return schedule


def _leaves(node: isl.ScheduleNode, path: tuple[int, ...] = ()):
    """Every leaf under ``node`` in document order, with its path of child positions."""
    if node.get_type() == isl.schedule_node_type.leaf:
        yield path, node
        return
    for k in range(node.n_children()):
        yield from _leaves(node.child(k), path + (k,))


def memory_ast(sdg: SDG, d: Domains, placed, moves: bool, separate: bool = False):
    """isl's AST of ``placed`` (a schedule with its memory statements), its loops of frees
    batched (TEMPO §5.3's promotion) and, when it holds moves, the redundant ones removed;
    ``separate``: partially unrolled (:func:`tempo.schedule.isl_schedule.build_ast`)."""
    tree = batch_frees(build_ast(sdg, d, placed, separate=separate))
    return swap_passes.apply(sdg, tree) if moves else tree
