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

A constant that already holds panels (a model's weights kept in this layout,
``tempo.llm.weights.Panels``) is read by a program as the matrix put back
together, ``reshape(permute(P, (1, 0, 2)), (k, n))``. On a backend with
panels, each product of at most ``Config.max_rows`` rows reading that matrix
is rewritten to multiply the panels themselves, and each product of more
rows puts the matrix back at its own point (as above): the panels are the
program's only copy of the weights.
:func:`panels_of`, :func:`matrix_of` and :func:`width_for` give the layout
and its width outside a compile.
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
from tempo.transforms.editing import Graph, Read, compose


@dataclass(frozen=True)
class Config:
    """``panel(rows)``: the columns per panel for a product of ``rows`` rows, or None to leave such
    products as they are (the compiler passes the backend's :meth:`weight_panel`; None: the pass
    does nothing). ``max_rows``: products of more rows are compute-bound and left alone."""

    panel: Callable[[int], int | None] | None = None
    max_rows: int = 32


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with each packable constant stored as column panels and its products rewritten, and
    each product of a matrix put back together from constant panels rewritten to read them."""
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
        if width is not None:
            _pack(graph, c, width, packed, cfg.max_rows)
            changed = True
        elif _read_panels(graph, c, cfg):
            changed = True
    return graph.to_sdg() if changed else sdg


def panels_of(matrices: np.ndarray, width: int) -> np.ndarray:
    """``matrices`` (..., k, n) as C-ordered column panels (..., n // width, k, width): panel ``j``
    holds columns ``j * width`` to ``(j + 1) * width`` (one copy, whatever the strides of ``matrices``)."""
    *lead, k, n = matrices.shape
    return np.ascontiguousarray(np.moveaxis(matrices.reshape(*lead, k, n // width, width), -2, -3))


def matrix_of(panels: np.ndarray) -> np.ndarray:
    """The matrices (..., k, n) whose column panels are ``panels`` (..., n // width, k, width): a copy
    (a view of a single panel)."""
    *lead, count, k, width = panels.shape
    return np.moveaxis(panels, -3, -2).reshape(*lead, k, count * width)


def width_for(cfg: Config, rows: int, columns) -> int | None:
    """The panel width of a matrix of ``columns`` columns whose products multiply ``rows`` rows at
    fewest, or None where it stays as it is: no panels for that many rows (``cfg.panel``), more rows
    than ``cfg.max_rows``, or columns that are not at least two panels of whole width."""
    if cfg.panel is None or rows > cfg.max_rows:
        return None
    width = cfg.panel(rows)
    if width is not None and (not isinstance(width, (int, np.integer)) or isinstance(width, bool) or width < 1):
        raise TempoError(f"pack_weights.Config(panel=...) gave {width!r} for products of {rows} rows; "
                         f"it must give a positive int (columns per panel) or None (leave them)")
    if width is None or not isinstance(columns, (int, np.integer)) or columns % width or columns < 2 * width:
        return None
    return int(width)


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
    return width_for(cfg, min(rows), node.shapes[0][1])


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
        panels = packed[id(array)] = panels_of(array, width)
    graph.set_node(replace(node, op=replace(node.op, value=Array(panels)), shapes=((n // width, k, width),)))
    for e in graph.readers(c):
        rows = _rows(graph, e)
        if rows is not None and rows > max_rows:
            _rewrite_whole_product(graph, e.sink, n // width, width)
        else:
            _rewrite_product(graph, e.sink, n // width, width)


def _read_panels(graph: Graph, c: int, cfg: Config) -> bool:
    """Rewrite the products that read constant ``c``, panels (count, k, width) at each point, put back
    together (``reshape(permute(c, (1, 0, 2)), (k, count * width))``) as their right operand, where
    the backend multiplies rows by panels (``cfg.panel`` of their fewest rows, or of
    ``cfg.max_rows`` if more): those of at most ``cfg.max_rows`` rows multiply the panels, the
    others put the matrix back at their own point (one matrix at a time, not one per point of the
    views' dims, is held). The views left unread are removed. Whether any product was rewritten."""
    node = graph.nodes[c]
    if len(node.shapes[0]) != 3 or c in graph.vectorized:
        return False
    count, k, width = node.shapes[0]
    products = []                        # (a product's read of the matrix, its read of c instead, its rows)
    for apart in graph.readers(c):
        permute = graph.nodes[apart.sink]
        if not (isinstance(permute.op, ops.PermuteOp) and permute.op.axes == (1, 0, 2) and _plain(graph, apart)):
            continue
        for whole in graph.readers(permute.id):
            reshape = graph.nodes[whole.sink]
            if not (isinstance(reshape.op, ops.ReshapeOp) and tuple(reshape.op.shape) == (k, count * width)
                    and _plain(graph, whole)):
                continue
            inner = compose(apart.index, permute.domain, whole.index)
            for e in graph.readers(reshape.id):
                index = None if inner is None else compose(inner, reshape.domain, e.index)
                if (isinstance(graph.nodes[e.sink].op, ops.MatMulOp) and e.sink_in == 1 and _plain(graph, e)
                        and index is not None and (rows := _rows(graph, e)) is not None):
                    products.append((e, index, rows))
    if not products or cfg.panel(min(cfg.max_rows, *(rows for _, _, rows in products))) is None:
        return False
    views = set()
    for e, index, rows in products:
        views |= {e.src, graph.inputs(e.src)[0].src}
        x = graph.inputs(e.sink)[0]
        graph.set_inputs(e.sink, [Read(x.src, x.src_out, x.index, x.cond), Read(c, 0, index)])
        if rows > cfg.max_rows:
            _rewrite_whole_product(graph, e.sink, count, width)
        else:
            _rewrite_product(graph, e.sink, count, width)
    for view in sorted(views, key=lambda v: isinstance(graph.nodes[v].op, ops.PermuteOp)):  # reshapes first
        if not graph.readers(view) and not graph.is_root(view):
            graph.remove(view)
    return True


def _plain(graph: Graph, e: Edge) -> bool:
    """Whether ``e`` reads a point (no slice, no condition) and neither of its ends is vectorized."""
    return (e.cond is None and not any(item.op == "slice" for item in e.index.args)
            and e.src not in graph.vectorized and e.sink not in graph.vectorized)


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
