"""Weight prepacking: the constant right operand of a product of few rows is stored as column panels.

A decoding step multiplies a handful of rows (the batch) by each weight
matrix, so it streams the weights once and does little else: its speed is
the speed memory is read at. NumPy's BLAS (OpenBLAS) reads a ``(k, n)``
matrix for a product of 4 rows at about 8 GB/s on this machine, packing
the whole matrix into its own layout first; the same numbers as ``n / r``
panels of ``r`` contiguous columns, ``(n / r, k, r)``, multiplied one panel
at a time, at about 29 GB/s (``benchmarks/matmul_panels.py``). Kernel
libraries prepack constant weights the same way (TVM's packed dense,
oneDNN's blocked weight formats).

The pass rewrites ``x @ W`` (``x`` of shape ``(..., m, k)``, ``W`` a
constant read at one point of each of its dims) as

    reshape(permute(unsqueeze(x, -3) @ P, nb <-> m), (..., m, n))

where ``P`` is ``W``'s value stored as panels, so the product reads each
panel once and the result, ``(..., nb, m, r)``, is put back in order (a copy
of ``m * n`` numbers, against ``k * n`` read). A constant is packed when
every reader of it is such a product and the fewest rows any of them
multiplies is at most ``Config.max_rows``; the panel width is the
backend's (:meth:`tempo.runtime.backends.Backend.weight_panel`), chosen for
that many rows. A product of more rows than ``Config.max_rows`` reading a
packed constant (a prompt's prefill beside the decoding steps) multiplies
the matrix put back together from the panels instead: a whole-matrix BLAS
product at that size runs about 1.65x faster than 32-column panels, and
putting the matrix back is one copy of it. The constant is replaced, not
copied, inside the program.
Runs after vectorization (which fixes how many rows each product has) and
before fusion (which folds the new steps into the product's island).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.ir.ops import Array
from tempo.ir.sdg import SDG, Edge, identity_index
from tempo.transforms.editing import Graph, Read


@dataclass(frozen=True)
class Config:
    """``panel(rows)``: the columns per panel for a product of ``rows`` rows, or None to leave such
    products as they are (the compiler passes the backend's :meth:`weight_panel`; None: the pass
    does nothing). ``max_rows``: products of more rows are compute-bound and left alone."""

    panel: Callable[[int], int | None] | None = None
    max_rows: int = 32


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each packable constant stored as column panels and its products rewritten."""
    if cfg.panel is None:
        return sdg
    if not isinstance(cfg.max_rows, int) or cfg.max_rows < 1:
        raise TempoError(f"pack_weights.Config(max_rows=...) takes a positive int, got {cfg.max_rows!r}")
    graph = Graph(sdg)
    packed: dict[int, np.ndarray] = {}  # id(original array) -> its panels, shared by constants holding it
    changed = False
    for c, node in list(graph.nodes.items()):
        if not isinstance(node.op, ops.ConstOp):
            continue
        width = _panel_width(graph, c, cfg)
        if width is None:
            continue
        _pack(graph, c, width, packed, cfg.max_rows)
        changed = True
    return graph.to_sdg() if changed else sdg


def _rows(graph: Graph, e: Edge) -> int | None:
    """The rows a product multiplies (its left operand's axes but the last, together), if static."""
    shape = graph.read_shape(graph.ins[e.sink][0])
    lead = shape[:-1]
    if len(shape) < 2 or not all(isinstance(s, (int, np.integer)) for s in lead):
        return None
    return math.prod(int(s) for s in lead)


def _panel_width(graph: Graph, c: int, cfg: Config) -> int | None:
    """The panel width for constant ``c``, or None when it is not packed (see the module docstring)."""
    node = graph.nodes[c]
    readers = graph.readers(c)
    if not readers or graph.is_root(c) or c in graph.vectorized or len(node.shapes[0]) != 2:
        return None
    rows = []
    for e in readers:
        sink = graph.nodes[e.sink]
        if (not isinstance(sink.op, ops.MatMulOp) or e.sink_in != 1 or e.cond is not None
                or any(item.op == "slice" for item in e.index.args) or sink.id in graph.vectorized
                or (m := _rows(graph, e)) is None):
            return None
        rows.append(m)
    fewest = min(rows)
    if fewest > cfg.max_rows:
        return None
    width = cfg.panel(fewest)
    if width is not None and (not isinstance(width, (int, np.integer)) or width < 1):
        raise TempoError(f"pack_weights.Config(panel=...) gave {width!r} for products of {fewest} rows; "
                         f"it must give a positive int (columns per panel) or None (leave them)")
    n = node.shapes[0][1]
    if width is None or not isinstance(n, (int, np.integer)) or n % width or n < 2 * width:
        return None
    return width


def _pack(graph: Graph, c: int, width: int, packed: dict, max_rows: int) -> None:
    """Store constant ``c`` as panels of ``width`` columns and rewrite each product reading it: as a
    panel product where it multiplies at most ``max_rows`` rows, else as a product of the matrix put
    back together from the panels (a prefill's thousands of rows: a BLAS product of the whole
    matrix runs at full speed, 32-column panels at about 0.6x, and putting the matrix back costs
    one copy of it, ``k * n`` numbers against ``m * k * n`` multiply-adds)."""
    node = graph.nodes[c]
    array = node.op.value.array
    k, n = node.shapes[0]
    panels = packed.get(id(array))
    if panels is None:
        lead = array.shape[:node.op.num_domain_axes]
        panels = packed[id(array)] = np.ascontiguousarray(
            np.moveaxis(array.reshape(*lead, k, n // width, width), -2, -3))
    graph.set_node(replace(node, op=replace(node.op, value=Array(panels)), shapes=((n // width, k, width),)))
    for e in graph.readers(c):
        rows = _rows(graph, e)
        if rows is not None and rows > max_rows:
            _rewrite_whole_product(graph, e.sink, n // width, width)
        else:
            _rewrite_product(graph, e.sink, n // width, width)


def _adder(graph: Graph, product: int) -> Callable:
    """``add(op, shape, reads)``: a new node beside ``product`` (its domain, dtype and site), read at its own point."""
    node = graph.nodes[product]
    own = identity_index(node.domain)

    def add(op, shape_out, reads):
        new = graph.add_node(op, node.domain, (shape_out,), (node.dtypes[0],), like=node)
        graph.set_inputs(new.id, reads)
        return Read(new.id, 0, own)

    return add


def _rewrite_whole_product(graph: Graph, product: int, count: int, width: int) -> None:
    """``x @ W`` (node ``product``, ``W`` now ``count`` panels of ``width`` columns) as ``x`` times the
    panels put back together, ``reshape(permute(P, (1, 0, 2)), (k, n))``."""
    x, w = graph.inputs(product)
    k = graph.read_shape(w)[-2]
    add = _adder(graph, product)
    apart = add(ops.PermuteOp((1, 0, 2)), (k, count, width), [Read(w.src, w.src_out, w.index)])
    whole = add(ops.ReshapeOp((k, count * width)), (k, count * width), [apart])
    graph.set_inputs(product, [Read(x.src, x.src_out, x.index), whole])


def _rewrite_product(graph: Graph, product: int, count: int, width: int) -> None:
    """``x @ W`` (node ``product``, ``W`` now ``count`` panels of ``width`` columns) as the
    panel product put back in order; the node becomes the final reshape, so its readers stay."""
    node = graph.nodes[product]
    x, w = graph.inputs(product)
    shape = graph.read_shape(x)
    lead, (m, k) = tuple(shape[:-2]), shape[-2:]
    add = _adder(graph, product)

    rank = len(lead) + 3
    rows = add(ops.UnsqueezeOp(rank - 3), lead + (1, m, k), [Read(x.src, x.src_out, x.index)])
    blocks = add(ops.MatMulOp(), lead + (count, m, width), [rows, Read(w.src, w.src_out, w.index)])
    order = tuple(range(rank - 3)) + (rank - 2, rank - 3, rank - 1)
    ordered = add(ops.PermuteOp(order), lead + (m, count, width), [blocks])
    graph.set_node(replace(node, op=ops.ReshapeOp(lead + (m, count * width))))
    graph.set_inputs(product, [ordered])
