"""Evict and load statements placed on the computed schedule (TEMPO §5.2, Fig. 15b).

For each swapped tensor (node ``n``, output ``j``) of the plan
(:func:`tempo.plan.swap.choose`) three kinds of statements join the
schedule, like the frees of :mod:`tempo.schedule.isl_memory`:

* ``E<n>_0`` (Evict_A) over every point produced, with the producer's
  identity dependence ``S<n>[p] -> E<n>_0[p]``: it runs right after the
  instance that produced ``p``;
* ``L<n>_<r+1>`` (Load) per reader statement ``S<r>``, over the pairs
  ``[q, p]`` of its read access (``S<r>[q]`` reads ``p``: Fig. 15b's "the
  timesteps of P needed by C at timestep t"), with the dependence
  ``L[q, p] -> S<r>[q]``: it runs right before the instance reading. It
  follows Evict_A, which runs right after the producer, which the reader
  follows;
* ``E<n>_<r+1>`` (Evict_B) over the same pairs, with the inverse dependence
  ``S<r>[q] -> E[q, p]``: it runs right after the instance reading.

(``_<j>`` follows where the node has several outputs.) Each statement
instance waits for exactly one instance of the computation, so
:func:`placements` returns maps from the memory statement's instances to the
instance they precede (loads) or follow (evicts), which
:func:`tempo.schedule.isl_memory.with_memory` turns into extension nodes or
one more time dimension without changing the computation's order. Between
two reads of a point by consecutive statements, the Evict_B of the first and
the load of the second meet with no use between them, and
:mod:`tempo.schedule.swap_passes` removes both: the point stays on the device.
"""
from __future__ import annotations

import islpy as isl

from tempo.ir.sdg import SDG
from tempo.schedule.isl_domains import Domains, executed_reads


def swap_statement(kind: str, node_id: int, reader: int | None, outputs: tuple[int, ...] = ()) -> str:
    """The isl name of the evict (``kind`` ``"E"``) or load (``"L"``) of ``node_id``'s ``outputs``
    (empty: all) for the reader statement ``reader`` (None: the evict right after production)."""
    return "_".join([f"{kind}{node_id}", str(0 if reader is None else reader + 1), *map(str, outputs)])


def placements(sdg: SDG, d: Domains, times: isl.UnionMap,
               swapped: set[tuple[int, int]]) -> tuple[isl.UnionMap | None, isl.UnionMap | None]:
    """``(loads, evicts)``: each load instance -> the instance it runs right before, each evict
    instance -> the instance it runs right after (see the module docstring)."""
    loads = evicts = None
    for node, out in sorted(swapped):
        if node not in d.executed or d.executed[node].is_empty():
            continue
        outputs = (out,) if len(sdg.nodes[node].shapes) > 1 else ()
        produced = d.executed[node]
        made = isl.Map.identity(produced.get_space().map_from_set()).intersect_domain(produced)
        evicts = _union(evicts, _named(made, swap_statement("E", node, None, outputs)))
        for reader, reads in sorted(_reads(sdg, d, node, out).items()):
            at = reads.domain_map().flatten_domain()  # [q, p] -> S<r>[q]: S<r>[q] reads p
            loads = _union(loads, _named(at, swap_statement("L", node, reader, outputs)))
            evicts = _union(evicts, _named(at, swap_statement("E", node, reader, outputs)))
    return loads, evicts


def _reads(sdg: SDG, d: Domains, node: int, out: int) -> dict[int, isl.Map]:
    """Per reader statement, its executed instances -> the points of ``(node, out)`` they read."""
    out_reads: dict[int, isl.Map] = {}
    for k, e in enumerate(sdg.edges):
        if e.src != node or e.src_out != out or e.sink_in < 0 or e.sink not in d.executed:
            continue
        reads = executed_reads(sdg, d, k).intersect_range(d.executed[node])
        if not reads.is_empty():
            out_reads[e.sink] = reads if e.sink not in out_reads else out_reads[e.sink].union(reads)
    return out_reads


def _named(m: isl.Map, name: str) -> isl.UnionMap:
    return isl.UnionMap.from_map(m.set_tuple_name(isl.dim_type.in_, name))


def _union(a: isl.UnionMap | None, b: isl.UnionMap) -> isl.UnionMap:
    return b if a is None else a.union(b)
