"""The symbolic dependence graph (SDG).

A :class:`Node` is an operator with a temporal domain (the step symbols of the
dims it varies over), output shapes and dtypes, and the user's source line
that created it. An :class:`Edge` says: at point ``p`` of its domain, input
``sink_in`` of ``sink`` is output ``src_out`` of ``src`` at the points
``index(p)`` (a ``seq`` with one point or slice per source dim), used only
where ``cond(p)`` holds (TimeRL §5.1: input id, phi, psi, output id).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tempo.errors import Site
from tempo.ir.edge_list import EdgeList
from tempo.ir.ops import FusedOp, Op
from tempo.ir.shapes import size
from tempo.symbolic.expr import Expr, seq


@dataclass(frozen=True)
class Node:
    id: int
    op: Op
    domain: tuple[Expr, ...]
    shapes: tuple[tuple, ...]
    dtypes: tuple[str, ...]
    site: Site | None = None
    label: str = ""

    def __str__(self) -> str:
        dom = ", ".join(d.name for d in self.domain)
        name = self.label or f"%{self.id}"
        return f"{name} = {_op_text(self.op)}[{dom}] -> {', '.join(_shape_text(s) for s in self.shapes)}:{','.join(self.dtypes)}"


@dataclass(frozen=True)
class Edge:
    sink: int
    sink_in: int
    src: int
    src_out: int
    index: Expr
    cond: Expr | None = None


def identity_index(domain: tuple[Expr, ...]) -> Expr:
    return seq(*domain)


@dataclass
class SDG:
    """Nodes by id and edges; built by the API, rewritten by passes."""

    nodes: dict[int, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=EdgeList)  # an EdgeList: indexed by sink and source
    _next_id: int = 0
    # node id -> dims turned into leading spatial axes by vectorization (outermost first)
    vectorized: dict[int, tuple[Expr, ...]] = field(default_factory=dict)
    # the nodes the program must compute (fetched tensors, sinks, state updates); set by compile
    roots: tuple[int, ...] = ()
    # (node, output) -> (node, output) now holding that value (fusion folds nodes into islands)
    moved: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    # tile dim bound name -> (bound name of the dim it tiles, tile size): its value is ceil(bound / size)
    tiles: dict[str, tuple[str, int]] = field(default_factory=dict)

    def __setattr__(self, name, value) -> None:
        super().__setattr__(name, EdgeList(value) if name == "edges" and not isinstance(value, EdgeList) else value)

    def add_node(self, op: Op, domain, shapes, dtypes, site=None, label="") -> Node:
        node = Node(self._next_id, op, tuple(domain), tuple(shapes), tuple(dtypes), site, label)
        self.nodes[node.id] = node
        self._next_id += 1
        return node

    def add_edge(self, edge: Edge) -> None:
        self.edges.append(edge)

    def resolve(self, node_id: int, out: int = 0) -> tuple[int, int]:
        """The (node, output) that holds output ``out`` of ``node_id`` after the passes."""
        return self.moved.get((node_id, out), (node_id, out))

    def in_edges(self, node_id: int) -> list[Edge]:
        """The edges into ``node_id``, by input (edges of one input in list order)."""
        return sorted(self.edges.into(node_id), key=lambda e: e.sink_in)

    def out_edges(self, node_id: int) -> list[Edge]:
        """The edges out of ``node_id``, in list order."""
        return self.edges.out_of(node_id)

    def read_shape(self, edge: Edge) -> tuple:
        """The shape of the value ``edge`` reads: one leading axis per slice of its index
        (the slice's length), then the source output's own shape."""
        slices = tuple(size(a.args[1] - a.args[0]) for a in edge.index.args if a.op == "slice")
        return slices + tuple(self.nodes[edge.src].shapes[edge.src_out])

    def describe(self, node_id: int) -> str:
        node = self.nodes[node_id]
        text = node.label or f"{node.op.name} %{node_id}"
        return f"{text} (defined at {node.site})" if node.site else text

    def __str__(self) -> str:
        lines = []
        for node in self.nodes.values():
            reads = []
            for e in self.in_edges(node.id):
                src = self.nodes[e.src]
                ref = src.label or f"%{e.src}"
                out = f".{e.src_out}" if src.op.num_outputs > 1 else ""
                cond = f" if {e.cond}" if e.cond is not None else ""
                reads.append(f"{ref}{out}{e.index}{cond}")
            lines.append(f"{node}  <- {', '.join(reads)}" if reads else str(node))
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz source: one box per node, edges labelled with their dependence."""
        out = ["digraph sdg {", "  rankdir=BT; node [shape=box, fontname=monospace];"]
        for node in self.nodes.values():
            dom = ", ".join(d.name for d in node.domain)
            label = f"{node.label + ': ' if node.label else ''}{_op_text(node.op)}\\n[{dom}] {_shape_text(node.shapes[0]) if node.shapes else ''}"
            out.append(f'  n{node.id} [label="{_escape(label)}"];')
        for e in self.edges:
            label = str(e.index) + (f" if {e.cond}" if e.cond is not None else "")
            out.append(f'  n{e.sink} -> n{e.src} [label="{_escape(label)}"];')
        out.append("}")
        return "\n".join(out)


def _escape(text: str) -> str:
    return text.replace('"', '\\"')


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _same(value, default) -> bool:
    """``value == default`` without building a symbolic equation when either is an ``Expr``."""
    return value is default or (type(value) is type(default) and not isinstance(value, Expr) and value == default)


def _op_text(op: Op) -> str:
    if isinstance(op, FusedOp):  # its steps, one after another
        return f"FusedOp[{'; '.join(_op_text(step.op) for step in op.steps)}]"
    defaults = {f.name: f.default for f in dataclasses.fields(op) if f.default is not dataclasses.MISSING}
    fields = [f"{k}={v}" for k, v in vars(op).items()
              if (k not in ("fn",) or isinstance(v, str)) and not (k in defaults and _same(v, defaults[k]))]
    return f"{op.name}({', '.join(fields)})" if fields else op.name
