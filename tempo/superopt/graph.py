"""A tensor dataflow graph IR for inference graphs (TASO's operator set).

A :class:`Node` is plain immutable data ``(op, src, attrs, shape)``. Nodes are
hash-consed: :func:`node` returns the existing node for the same op, sources
and attributes, so identity *is* structural equality and common
subexpressions are shared for free. Every node's shape is inferred when it is
built, by the op's entry in :data:`OPS`; a bad shape raises
:class:`ShapeError` naming the op and the shapes it was given.

A :class:`Graph` is its input nodes, its output nodes and the arrays of its
weights. Rewriting never mutates: :meth:`Graph.replace` rebuilds the graph
from its outputs with some nodes substituted.
"""
from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tempo.errors import TempoError

Shape = tuple[int, ...]


class ShapeError(TempoError):
    """An op was given inputs (or attributes) whose shapes it cannot take."""


@dataclass(frozen=True, eq=False)
class Node:
    """One tensor operator: its op name, source nodes, attributes and output shape."""

    op: str
    src: tuple[Node, ...]
    attrs: tuple[tuple[str, Any], ...]
    shape: Shape

    def attr(self, key: str) -> Any:
        """The value of attribute ``key`` (every attribute has a value: defaults are filled in)."""
        return dict(self.attrs)[key]

    def __reduce__(self):
        # unpickled nodes are hash-consed again, so structurally equal graphs keep equal keys
        return _revive, (self.op, self.src, self.attrs, self.shape)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.attrs if k != "proto")
        return f"{self.op}[{args}]{list(self.shape)}"


@dataclass(frozen=True)
class OpDef:
    """How one op type behaves: arity, attribute defaults and shape inference."""

    name: str
    arity: tuple[int, ...] | None          # allowed numbers of sources; None: any
    defaults: Mapping[str, Any]
    infer: Callable[[list[Shape], dict[str, Any]], Shape]
    normalize: Callable[[list[Shape], dict[str, Any]], dict[str, Any]] = lambda shapes, a: a


OPS: dict[str, OpDef] = {}


def _register(name, arity, defaults, infer, normalize=None):
    OPS[name] = OpDef(name, arity, defaults, infer, normalize or (lambda shapes, a: a))


def _fail(op: str, shapes: list[Shape], why: str) -> ShapeError:
    return ShapeError(f"{op} cannot take inputs of shapes {[list(s) for s in shapes]}: {why}")


def _axis(axis: int, rank: int, op: str, shapes: list[Shape]) -> int:
    """Axes are stored negative (counted from the end), so they survive batch dimensions."""
    if not -rank <= axis < rank:
        raise _fail(op, shapes, f"axis {axis} is out of range for rank {rank}")
    return axis - rank if axis >= 0 else axis


def broadcast(op: str, shapes: list[Shape]) -> Shape:
    """NumPy broadcasting of ``shapes``."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise _fail(op, shapes, "they do not broadcast") from None


# ---------------------------------------------------------------- leaves
def _leaf_shape(shapes, a):
    return tuple(a["shape"])


for _leaf in ("input", "weight"):
    _register(_leaf, (0,), {"name": "", "shape": ()}, _leaf_shape)
_register("scalar", (0,), {"value": 0.0}, lambda shapes, a: ())
# a step of a Tempo island this IR does not model, kept as it is (which step, and which output)
_register("opaque", None, {"proto": b"", "index": 0, "shape": (), "dtype": 1}, _leaf_shape)

# ---------------------------------------------------------------- element-wise
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")
UNARY = ("relu", "sigmoid", "tanh", "gelu", "exp", "sqrt")
BINARY = ("add", "sub", "mul", "div")
for _u in UNARY:
    _register(_u, (1,), {}, lambda shapes, a: shapes[0])
for _b in BINARY:
    _register(_b, (2,), {}, lambda shapes, a, _n=_b: broadcast(_n, shapes))


# ---------------------------------------------------------------- dense ops
def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _conv2d(shapes, a):
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4:
        raise _fail("conv2d", shapes, "input and weight must be rank 4 (NCHW, KCRS)")
    g = a["groups"]
    if x[1] != w[1] * g or w[0] % g:
        raise _fail("conv2d", shapes, f"channels do not agree with groups={g}")
    if len(shapes) == 3 and shapes[2] != (w[0],):
        raise _fail("conv2d", shapes, "bias must have shape [out_channels]")
    h, v = _conv_out(x[2], w[2], a["stride"], a["pad"]), _conv_out(x[3], w[3], a["stride"], a["pad"])
    if h <= 0 or v <= 0:
        raise _fail("conv2d", shapes, "the kernel is larger than the padded input")
    return (x[0], w[0], h, v)


_register("conv2d", (2, 3), {"stride": 1, "pad": 0, "groups": 1, "act": "none"}, _conv2d)


def _matmul(shapes, a):
    x, w = shapes[0], shapes[1]
    if len(x) < 2 or len(w) < 2 or x[-1] != w[-2]:
        raise _fail("matmul", shapes, "inner dimensions do not agree")
    batch = broadcast("matmul", [x[:-2], w[:-2]])
    if len(shapes) == 3 and shapes[2] != (w[-1],):
        raise _fail("matmul", shapes, "bias must have shape [columns]")
    return (*batch, x[-2], w[-1])


_register("matmul", (2, 3), {"act": "none"}, _matmul)


def _pool(name):
    def infer(shapes, a):
        x = shapes[0]
        if len(x) != 4:
            raise _fail(name, shapes, "input must be rank 4 (NCHW)")
        k, s, p = a["kernel"], a["stride"], a["pad"]
        h, w = _conv_out(x[2], k, s, p), _conv_out(x[3], k, s, p)
        if h <= 0 or w <= 0 or p > k // 2:
            raise _fail(name, shapes, "the window does not fit")
        return (x[0], x[1], h, w)
    return infer


for _p in ("maxpool", "avgpool"):
    _register(_p, (1,), {"kernel": 2, "stride": 2, "pad": 0}, _pool(_p))


def _batchnorm(shapes, a):
    x = shapes[0]
    if len(x) != 4 or any(s != (x[1],) for s in shapes[1:]):
        raise _fail("batchnorm", shapes, "needs NCHW input and four [C] parameters")
    return x


_register("batchnorm", (5,), {"eps": 1e-5}, _batchnorm)


def _bn_param(name):
    def infer(shapes, a):
        if len(set(shapes)) != 1 or len(shapes[0]) != 1:
            raise _fail(name, shapes, "needs equal rank-1 parameters")
        return shapes[0]
    return infer


_register("bn_scale", (2,), {"eps": 1e-5}, _bn_param("bn_scale"))     # s / sqrt(v + eps)
_register("bn_shift", (4,), {"eps": 1e-5}, _bn_param("bn_shift"))     # b - m s / sqrt(v + eps)


def _layernorm(shapes, a):
    x = shapes[0]
    if shapes[1] != (x[-1],) or shapes[2] != (x[-1],):
        raise _fail("layernorm", shapes, "scale and bias must have the last dimension's size")
    return x


_register("layernorm", (3,), {"eps": 1e-5}, _layernorm)


def _softmax_norm(shapes, a):
    return {**a, "axis": _axis(a["axis"], len(shapes[0]), "softmax", shapes)}


_register("softmax", (1,), {"axis": -1}, lambda shapes, a: shapes[0], _softmax_norm)


def _enlarge(shapes, a):
    w = shapes[0]
    size = a["size"]
    if len(w) != 4 or w[2] > size or w[3] > size or (size - w[2]) % 2 or (size - w[3]) % 2:
        raise _fail("enlarge", shapes, f"cannot centre the kernel in {size}x{size}")
    return (w[0], w[1], size, size)


_register("enlarge", (1,), {"size": 3}, _enlarge)


# ---------------------------------------------------------------- layout ops
def _concat_norm(shapes, a):
    return {**a, "axis": _axis(a["axis"], len(shapes[0]), "concat", shapes)}


def _concat(shapes, a):
    ax = a["axis"]
    if len(shapes) < 2:
        raise _fail("concat", shapes, "needs at least two inputs")
    rest = {s[:ax] + (s[ax + 1:] if ax != -1 else ()) for s in shapes}
    if len({len(s) for s in shapes}) != 1 or len(rest) != 1:
        raise _fail("concat", shapes, f"they differ outside axis {ax}")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return tuple(out)


_register("concat", None, {"axis": 0}, _concat, _concat_norm)


def _slice_norm(shapes, a):
    return {**a, "axis": _axis(a["axis"], len(shapes[0]), "slice", shapes)}


def _slice(shapes, a):
    x, ax = shapes[0], a["axis"]
    if not 0 <= a["start"] < a["end"] <= x[ax]:
        raise _fail("slice", shapes, f"[{a['start']}:{a['end']}] is not inside axis {ax}")
    out = list(x)
    out[ax] = a["end"] - a["start"]
    return tuple(out)


_register("slice", (1,), {"axis": 0, "start": 0, "end": 1}, _slice, _slice_norm)


def _reshape(shapes, a):
    if int(np.prod(shapes[0])) != int(np.prod(a["shape"])):
        raise _fail("reshape", shapes, f"cannot become {list(a['shape'])}")
    return tuple(a["shape"])


_register("reshape", (1,), {"shape": ()}, _reshape)


def _transpose(shapes, a):
    x, perm = shapes[0], a["perm"]
    if sorted(perm) != list(range(len(x))):
        raise _fail("transpose", shapes, f"perm {list(perm)} is not a permutation of its axes")
    return tuple(x[p] for p in perm)


_register("transpose", (1,), {"perm": ()}, _transpose)


# ---------------------------------------------------------------- construction
_INTERNED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def node(op: str, *src: Node, **attrs: Any) -> Node:
    """The (hash-consed) node ``op(*src, **attrs)``; raises ShapeError for bad shapes."""
    if op not in OPS:
        raise TempoError(f"unknown tensor op '{op}' (known: {', '.join(sorted(OPS))})")
    spec = OPS[op]
    if spec.arity is not None and len(src) not in spec.arity:
        raise ShapeError(f"{op} takes {' or '.join(map(str, spec.arity))} inputs, not {len(src)}")
    unknown = set(attrs) - set(spec.defaults)
    if unknown:
        raise TempoError(f"{op} has no attribute {', '.join(sorted(unknown))}")
    shapes = [s.shape for s in src]
    full = spec.normalize(shapes, {**spec.defaults, **{k: _freeze(v) for k, v in attrs.items()}})
    frozen = tuple(sorted(full.items()))
    key = (op, tuple(id(s) for s in src), frozen)
    found = _INTERNED.get(key)
    if found is not None:
        return found
    made = Node(op, tuple(src), frozen, tuple(int(d) for d in spec.infer(shapes, full)))
    _INTERNED[key] = made
    return made


def _revive(op: str, src: tuple[Node, ...], attrs: tuple, shape: Shape) -> Node:
    """The interned node with these fields (for unpickling: the attributes are normalised)."""
    key = (op, tuple(id(s) for s in src), attrs)
    found = _INTERNED.get(key)
    if found is None:
        found = _INTERNED[key] = Node(op, src, attrs, shape)
    return found


def rebuild(n: Node, src: Iterable[Node]) -> Node:
    """``n`` with its sources replaced by ``src`` (same op and attributes).

    When the new sources have the old ones' shapes, the attributes are already
    normalised and the output shape is unchanged, so both are reused (a rewrite
    rebuilds every node downstream of it, mostly with unchanged shapes).
    """
    src = tuple(src)
    if len(src) != len(n.src) or any(a.shape != b.shape for a, b in zip(src, n.src)):
        return node(n.op, *src, **dict(n.attrs))
    return _revive(n.op, src, n.attrs, n.shape)


# ---------------------------------------------------------------- graphs
LEAVES = ("input", "weight", "scalar")


@dataclass(frozen=True, eq=False)
class Graph:
    """An inference graph: input nodes, output nodes, the weights' arrays by name,
    and the outputs' names (``out0``, ``out1``, ... unless given)."""

    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)
    output_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.output_names:
            object.__setattr__(self, "output_names",
                               tuple(f"out{i}" for i in range(len(self.outputs))))

    def __reduce__(self):
        # the cached properties hold node ids, which mean nothing in another process
        return Graph, (self.inputs, self.outputs, dict(self.weights), self.output_names)

    def with_outputs(self, outputs: Iterable[Node], weights: Mapping[str, np.ndarray] | None = None
                     ) -> Graph:
        """The same graph (inputs, output names) with new output nodes (and weights)."""
        return Graph(self.inputs, tuple(outputs), self.weights if weights is None else weights,
                     self.output_names)

    def topo(self) -> list[Node]:
        """Every node reachable from the outputs, each after its sources."""
        return list(self._order)

    def nodes_of(self, op: str) -> tuple[Node, ...]:
        """The graph's nodes of type ``op``, in topological order."""
        return self._by_op.get(op, ())

    @cached_property
    def _by_op(self) -> dict[str, tuple[Node, ...]]:
        index: dict[str, list[Node]] = {}
        for n in self._order:
            index.setdefault(n.op, []).append(n)
        return {op: tuple(ns) for op, ns in index.items()}

    @cached_property
    def _order(self) -> tuple[Node, ...]:
        order, seen, stack = [], set(), [(o, False) for o in reversed(self.outputs)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((s, False) for s in reversed(n.src) if id(s) not in seen)
        return tuple(order)

    def consumers(self) -> dict[int, list[Node]]:
        """For each node id, the nodes that read it."""
        return {k: [n for _, n in readers] for k, readers in self._readers.items()}

    def constant_ids(self) -> set[int]:
        """Ids of nodes that depend on no input: weights, scalars and ops on them only."""
        return set(self._constant)

    @cached_property
    def _constant(self) -> frozenset[int]:
        const: set[int] = set()
        for n in self._order:
            if n.op in ("weight", "scalar") or (n.src and n.op != "opaque"
                                               and all(id(s) in const for s in n.src)):
                const.add(id(n))
        return frozenset(const)

    @cached_property
    def _readers(self) -> dict[int, tuple[tuple[int, Node], ...]]:
        """For each node id, its consumers with their positions in the topological order."""
        readers: dict[int, list[tuple[int, Node]]] = {}
        for i, n in enumerate(self._order):
            for s in n.src:
                readers.setdefault(id(s), []).append((i, n))
        return {k: tuple(v) for k, v in readers.items()}

    def replace(self, mapping: Mapping[int, Node]) -> Graph:
        """The graph with each node whose id is in ``mapping`` replaced by its value.

        Only the nodes downstream of a replaced one are rebuilt, in topological
        order (a heap of positions: a node is rebuilt after every changed source).
        """
        done: dict[int, Node] = dict(mapping)
        pending = [(i, id(n), n) for k in mapping for i, n in self._readers.get(k, ())]
        heapq.heapify(pending)
        while pending:
            _, key, n = heapq.heappop(pending)
            if key in done:
                continue
            done[key] = rebuild(n, [done.get(id(s), s) for s in n.src])
            for item in self._readers.get(key, ()):
                heapq.heappush(pending, (item[0], id(item[1]), item[1]))
        return self.with_outputs(done.get(id(o), o) for o in self.outputs)

    def key(self) -> tuple[Node, ...]:
        """A key equal for structurally equal graphs (nodes are hash-consed)."""
        return self.outputs

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each op type the graph has."""
        counts: dict[str, int] = {}
        for n in self.topo():
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts


@dataclass(frozen=True)
class RunPlan:
    """A graph laid out for an executor: one slot per node (``values``, with each weight's
    and scalar's value already in place), the input slots by name, the kernel steps
    ``(kernel, attrs, argument slots, output slot)`` in order, and the output slots."""

    values: list
    inputs: list[tuple[int, str]]
    steps: list[tuple[Callable, dict, tuple[int, ...], int]]
    outputs: list[int]


def run_plan(graph: Graph, kernels: Mapping[str, Callable], constant: Callable[[np.ndarray], Any]) -> RunPlan:
    """The :class:`RunPlan` of ``graph`` with ``kernels``; ``constant`` turns a float32 array
    (a weight's, or a scalar's 0-d one) into the executor's value."""
    slot: dict[int, int] = {}
    plan = RunPlan([], [], [], [])
    for n in graph.topo():
        slot[id(n)] = len(plan.values)
        plan.values.append(None)
        if n.op == "input":
            plan.inputs.append((slot[id(n)], n.attr("name")))
        elif n.op == "weight":
            plan.values[-1] = constant(np.asarray(graph.weights[n.attr("name")], np.float32))
        elif n.op == "scalar":
            plan.values[-1] = constant(np.float32(n.attr("value")))
        else:
            plan.steps.append((kernels[n.op], dict(n.attrs), tuple(slot[id(s)] for s in n.src), slot[id(n)]))
    plan.outputs.extend(slot[id(o)] for o in graph.outputs)
    return plan


class GraphBuilder:
    """Builds a graph with named inputs and randomly initialised weights.

    >>> b = GraphBuilder(seed=0)
    >>> x = b.input("x", (2, 8))
    >>> g = b.build([node("relu", node("matmul", x, b.weight((8, 4))))])
    """

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.inputs: list[Node] = []
        self.weights: dict[str, np.ndarray] = {}

    def input(self, name: str, shape: Iterable[int]) -> Node:
        """A new graph input."""
        n = node("input", name=name, shape=tuple(shape))
        self.inputs.append(n)
        return n

    def weight(self, shape: Iterable[int], scale: float | None = None,
               value: np.ndarray | None = None) -> Node:
        """A new weight, drawn from N(0, scale^2) (scale defaults to 1/sqrt(fan-in))."""
        shape = tuple(shape)
        if value is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
            value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        name = f"w{len(self.weights)}"
        self.weights[name] = np.asarray(value, dtype=np.float32)
        return node("weight", name=name, shape=shape)

    def build(self, outputs: Iterable[Node], names: Iterable[str] = ()) -> Graph:
        """The finished graph (outputs named ``names``, or out0, out1, ...)."""
        return Graph(tuple(self.inputs), tuple(outputs), dict(self.weights), tuple(names))
