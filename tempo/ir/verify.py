"""A checker of the SDG's invariants, run after every pass in the tests.

:func:`verify` raises a :class:`~tempo.errors.TempoError` naming the first
node or edge that breaks one, and the pass that produced the SDG:

* nodes: the table's key is the node's id; a domain holds step symbols of
  declared dims, each once, in the context's order; one shape and one
  dtype per output;
* edges: sink and source exist, the output exists, a node's input ports
  are ``0..k-1``; an index has one item per source dim; indices and
  conditions use only the sink's steps and bound symbols; a slice is not
  empty, and neither a slice nor a point lies outside the source dim at
  every point (where the prover decides it);
* shapes and dtypes: inferred again by :mod:`tempo.ir.shapes` from what the
  inputs read, they are the recorded ones (a merge's inputs have its shape,
  a fused island's steps are checked one by one);
* roots, moved values and vectorized dims name existing nodes.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import broadcast, fmt, infer, same_size
from tempo.symbolic.expr import Expr, bound_of, step_of, symbol
from tempo.symbolic.simplify import prove_nonneg


class VerifyError(TempoError):
    """The SDG breaks one of its invariants: a bug in the pass named, not in the user's program."""


def verify(sdg: SDG, dims: Iterable[Expr] | None = None, after: str | None = None) -> None:
    """Check ``sdg`` (see the module docstring); ``dims``: the declared dims in order, when known;
    ``after``: the pass that produced it, for the message."""
    try:
        _Checker(sdg, tuple(dims) if dims is not None else None).run()
    except _Broken as broken:
        if after:
            raise VerifyError(f"the SDG after the {after!r} pass is invalid: {broken.args[0]} (a bug in that "
                              f"pass; passes={{{after!r}: False}} compiles without it)") from None
        raise VerifyError(f"the SDG as built is invalid: {broken.args[0]}") from None


class _Broken(Exception):
    pass


class _Checker:
    def __init__(self, sdg: SDG, dims: tuple[Expr, ...] | None):
        self.sdg, self.dims = sdg, dims if dims is None else _with_tile_dims(dims, sdg.tiles)
        self.ins: dict[int, list[Edge]] = {n: [] for n in sdg.nodes}

    def run(self) -> None:
        for n, node in self.sdg.nodes.items():
            self.node(n, node)
        for e in self.sdg.edges:
            self.edge(e)
        for n, node in self.sdg.nodes.items():
            ports = sorted(e.sink_in for e in self.ins[n])
            if ports != list(range(len(ports))):
                raise _Broken(f"{self.name(n)} has input ports {ports}, not 0..{len(ports) - 1}")
            self.shapes(node, sorted(self.ins[n], key=lambda e: e.sink_in))
        self.tables()

    def name(self, n: int) -> str:
        return self.sdg.describe(n) if n in self.sdg.nodes else f"node %{n}"

    def edge_name(self, e: Edge) -> str:
        cond = f" if {e.cond}" if e.cond is not None else ""
        return f"the edge {self.name(e.sink)} input {e.sink_in} <- %{e.src}.{e.src_out}{e.index}{cond}"

    # ----- nodes -----
    def node(self, n: int, node: Node) -> None:
        if node.id != n:
            raise _Broken(f"node %{node.id} is stored under id {n}")
        seen = set()
        for d in node.domain:
            if not (isinstance(d, Expr) and d.is_symbol and d.kind == "step") or d in seen:
                raise _Broken(f"{self.name(n)} has domain {node.domain}: not distinct step symbols")
            seen.add(d)
        if self.dims is not None:
            unknown = [d.name for d in node.domain if not any(d is x for x in self.dims)]
            if unknown:
                raise _Broken(f"{self.name(n)} varies over {', '.join(unknown)}, not a declared dim")
            if list(node.domain) != sorted(node.domain, key=lambda d: _position(self.dims, d)):
                raise _Broken(f"{self.name(n)} has its dims {node.domain} out of the declared order")
        if not len(node.shapes) == len(node.dtypes) == node.op.num_outputs:
            raise _Broken(f"{self.name(n)} has {len(node.shapes)} shapes and {len(node.dtypes)} dtypes "
                          f"for {node.op.num_outputs} outputs")

    # ----- edges -----
    def edge(self, e: Edge) -> None:
        nodes = self.sdg.nodes
        if e.sink not in nodes or e.src not in nodes:
            missing = e.sink if e.sink not in nodes else e.src
            raise _Broken(f"an edge %{e.sink} input {e.sink_in} <- %{e.src} names node %{missing}, "
                          f"which is not in the SDG")
        sink, src = nodes[e.sink], nodes[e.src]
        if not 0 <= e.src_out < len(src.shapes):
            raise _Broken(f"{self.edge_name(e)} reads output {e.src_out} of a node with {len(src.shapes)}")
        if e.index.op != "seq" or len(e.index.args) != len(src.domain):
            raise _Broken(f"{self.edge_name(e)} has an index of {len(e.index.args)} items for a source "
                          f"over {len(src.domain)} dims ({', '.join(d.name for d in src.domain)})")
        for what in (e.index, e.cond):
            if what is None:
                continue
            stray = [s.name for s in what.free_symbols()
                     if not (s.kind == "bound" or (s.kind == "step" and any(s is d for d in sink.domain)))]
            if stray:
                raise _Broken(f"{self.edge_name(e)} uses {', '.join(sorted(stray))}, not a dim of the "
                              f"reading node ({', '.join(d.name for d in sink.domain)}) nor a bound")
        for d, item in zip(src.domain, e.index.args):
            self.in_range(e, d, item)
        if e.sink_in >= 0:
            self.ins[e.sink].append(e)

    def in_range(self, e: Edge, d: Expr, item: Expr) -> None:
        problem = _out_of_range(item, d)
        if problem:
            raise _Broken(f"{self.edge_name(e)} {problem}")

    # ----- shapes and dtypes -----
    def shapes(self, node: Node, edges: list[Edge]) -> None:
        reads = [(self.sdg.read_shape(e), self.sdg.nodes[e.src].dtypes[e.src_out]) for e in edges]
        if isinstance(node.op, ops.MergeOp):
            return self.merge(node, edges, reads)
        if isinstance(node.op, ops.FusedOp):
            return self.fused(node, reads)
        self.inferred(node.op, [s for s, _ in reads], [d for _, d in reads], node.shapes, node.dtypes,
                      self.name(node.id))

    def inferred(self, op: ops.Op, shapes, dtypes, want_shapes, want_dtypes, what: str) -> None:
        try:
            got_shapes, got_dtypes = infer(op, list(shapes), list(dtypes))
        except Exception as err:  # a ShapeError, or a rule that cannot even unpack its inputs
            raise _Broken(f"{what}: its inputs {', '.join(fmt(s) for s in shapes)} do not fit "
                          f"{op.name} ({type(err).__name__}: {err})") from None
        if isinstance(op, (ops.RandomOp, ops.EvalSymbolOp)):  # vectorized dims lead the result
            got_shapes = tuple(tuple(bound_of(d) for d in op.vectorized) + tuple(s) for s in got_shapes)
        for k, (got, want) in enumerate(zip(got_shapes, want_shapes)):
            if not _same_shape(got, want):
                raise _Broken(f"{what}: output {k} is recorded as {fmt(want)}, but its inputs give {fmt(got)}")
        if tuple(got_dtypes) != tuple(want_dtypes):
            raise _Broken(f"{what}: dtypes recorded as {tuple(want_dtypes)}, but its inputs give "
                          f"{tuple(got_dtypes)}")

    def merge(self, node: Node, edges: list[Edge], reads) -> None:
        (want,), (dtype,) = node.shapes, node.dtypes
        for k, (e, (shape, got)) in enumerate(zip(edges, reads)):
            fits = _broadcasts(shape, want) if k in node.op.broadcast else _same_shape(shape, want)
            if not fits or got != dtype:
                raise _Broken(f"{self.edge_name(e)}: a merge of {fmt(want)}:{dtype} reads {fmt(shape)}:{got}")

    def fused(self, node: Node, reads) -> None:
        values: list[list[tuple]] = []
        for j, step in enumerate(node.op.steps):
            args = [reads[k] if i < 0 else values[i][k] for i, k in step.inputs]
            self.inferred(step.op, [s for s, _ in args], [d for _, d in args], step.shapes, step.dtypes,
                          f"{self.name(node.id)}, step {j} ({step.op.name})")
            values.append(list(zip(step.shapes, step.dtypes)))
        for k, (i, out) in enumerate(node.op.outputs):
            shape, dtype = values[i][out]
            if not _same_shape(shape, node.shapes[k]) or dtype != node.dtypes[k]:
                raise _Broken(f"{self.name(node.id)}: output {k} is recorded as {fmt(node.shapes[k])}:"
                              f"{node.dtypes[k]}, its step gives {fmt(shape)}:{dtype}")

    # ----- the tables beside the graph -----
    def tables(self) -> None:
        nodes = self.sdg.nodes
        for r in self.sdg.roots:
            if r not in nodes:
                raise _Broken(f"root %{r} is not in the SDG")
        for key, (n, out) in self.sdg.moved.items():
            if n not in nodes or not 0 <= out < len(nodes[n].shapes):
                raise _Broken(f"the value of %{key[0]}.{key[1]} is recorded as moved to %{n}.{out}, "
                              f"which does not exist")
        for n in self.sdg.vectorized:
            if n not in nodes:
                raise _Broken(f"vectorized dims are recorded for %{n}, which is not in the SDG")


@lru_cache(maxsize=65536)
def _out_of_range(item: Expr, d: Expr) -> str | None:
    """What is wrong with reading dim ``d`` at ``item`` at every point, if the prover shows it."""
    if item is d:
        return None
    bound = bound_of(d)
    if item.op == "slice":
        start, stop = item.args
        if prove_nonneg(start - stop - 1):
            return f"slices {d.name} by {item}, empty at every point"
        low, high = start, stop - 1
    else:
        low = high = item
    if prove_nonneg(-high - 1) or prove_nonneg(low - bound):
        return f"reads {d.name} at {item}, outside 0..{bound.name}-1 at every point"
    return None


def _with_tile_dims(dims: tuple[Expr, ...], tiles: dict[str, tuple[str, int]]) -> tuple[Expr, ...]:
    """``dims`` with each tile dim (``SDG.tiles``) right after the dim it tiles."""
    out = []
    for d in dims:
        out.append(d)
        out.extend(step_of(symbol(n, "bound", f"{d.name}_tile")) for n, (whole, _) in tiles.items()
                   if whole == bound_of(d).name)
    return tuple(out)


def _position(dims: tuple[Expr, ...], d: Expr) -> int:
    return next(k for k, x in enumerate(dims) if x is d)


def _same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def _broadcasts(shape: tuple, to: tuple) -> bool:
    try:
        return _same_shape(broadcast([tuple(shape), tuple(to)]), to)
    except TempoError:
        return False

