"""The superoptimiser on a Tempo program's static islands (the fuse pass's FusedOps).

An island's steps become a :class:`~tempo.superopt.graph.Graph`: float32
matmuls, element-wise arithmetic and activations, permutes, concatenations,
static reshapes and scalar constants are translated to the TASO operator set;
every other step becomes an ``opaque`` node that keeps its place in the
dataflow (the rules never match it, the cost model does not count it), and a
cast to the dtype its input already has is dropped. The search rewrites the
graph, and the result is translated back to steps.

Island shapes are symbolic (``(B, 32)`` after vectorization). For the search
each bound symbol stands for a concrete size (``sizes``, default
:data:`DEFAULT_SIZE`), the size the cost model times. A rewrite found at those
sizes is kept only if it holds at every size: the rewritten steps must infer,
symbolically, the island's own output shapes (a concatenation of ``(B, 32)``
and ``(32, 32)`` that was only legal because ``B`` stood for 32 fails here),
and both islands are run on random inputs at other sizes and must agree.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from tempo.ir import ops
from tempo.ir.shapes import infer, same_size
from tempo.superopt.graph import Graph, Node, ShapeError, node
from tempo.symbolic.expr import Expr, as_expr, make_slice
from tempo.symbolic.simplify import simplify

DEFAULT_SIZE = 16
UNARY = ("relu", "sigmoid", "tanh", "exp", "sqrt")
BINARY = ("add", "sub", "mul", "div")
FLOAT = "float32"


class Untranslatable(Exception):
    """A rewritten graph holds something the island's steps cannot express."""


@dataclass
class Island:
    """A FusedOp with the shapes and dtypes of its inputs (the reads of its node)."""

    op: ops.FusedOp
    in_shapes: tuple[tuple, ...]
    in_dtypes: tuple[str, ...]

    def symbols(self) -> dict[str, str]:
        """Every symbol the island's shapes and steps name, by name: its kind (``bound``, ``step``)."""
        found: dict[str, str] = {}

        def visit(value) -> None:
            if isinstance(value, Expr):
                found.update((s.name, s.kind) for s in value.free_symbols())
            elif isinstance(value, (tuple, list)):
                for item in value:
                    visit(item)

        visit(self.in_shapes)
        for step in self.op.steps:
            visit(step.shapes)
            visit([getattr(step.op, f.name) for f in fields(step.op)])
        return found

    def output_shapes(self) -> list[tuple]:
        """The shapes of the island's outputs."""
        return [self.op.steps[j].shapes[k] for j, k in self.op.outputs]


def concrete(shape: tuple, sizes: dict[str, int]) -> tuple[int, ...] | None:
    """``shape`` with every bound symbol at its size; None where a dim depends on a step."""
    out = []
    for dim in shape:
        if isinstance(dim, int):
            out.append(dim)
            continue
        expr = simplify(as_expr(dim).substitute({s: sizes.get(s.name, DEFAULT_SIZE)
                                                  for s in as_expr(dim).free_symbols()
                                                  if s.kind == "bound"}))
        if not expr.is_const:
            return None
        out.append(int(expr.value))
    return tuple(out)


# ---------------------------------------------------------------- steps -> graph
def to_graph(island: Island, sizes: dict[str, int]) -> Graph:
    """The island as a superopt graph: inputs ``in0, in1, ...``, one output per island output.

    A value whose shape depends on a step (not only on bounds) is opaque, and so is every
    step that reads one.
    """
    values: dict[tuple[int, int], Node] = {}
    dtypes: dict[tuple[int, int], str] = {}
    unknown: set[int] = set()                     # ids of nodes whose shape is not concrete

    def leaf(ref, made: Node, shape) -> None:
        values[ref] = made
        if shape is None:
            unknown.add(id(made))

    inputs = []
    for k, (shape, dtype) in enumerate(zip(island.in_shapes, island.in_dtypes)):
        fixed = concrete(shape, sizes)
        inputs.append(node("input", name=f"in{k}", shape=fixed or ()))
        leaf((-1, k), inputs[-1], fixed)
        dtypes[(-1, k)] = dtype
    for j, step in enumerate(island.op.steps):
        srcs = [values[ref] for ref in step.inputs]
        shapes = [concrete(s, sizes) for s in step.shapes]
        made = None
        if not any(id(s) in unknown for s in srcs) and None not in shapes:
            made = _translate(step, srcs, [dtypes[ref] for ref in step.inputs])
        if made is None:
            made = [node("opaque", *srcs, proto=f"step{j}".encode(), index=k, shape=shape or ())
                    for k, shape in enumerate(shapes)]
        for k, n in enumerate(made):
            leaf((j, k), n, shapes[k])
            dtypes[(j, k)] = step.dtypes[k]
    return Graph(tuple(inputs), tuple(values[ref] for ref in island.op.outputs))


def _translate(step: ops.FusedStep, srcs: list[Node], in_dtypes: list[str]) -> list[Node] | None:
    """The step as TASO nodes, or None where it stays opaque."""
    op = step.op
    if isinstance(op, ops.CastOp) and in_dtypes == [op.dtype]:
        return srcs
    if any(d != FLOAT for d in (*in_dtypes, *step.dtypes)):
        return None
    try:
        if isinstance(op, ops.ConstOp):
            value = op.value.array
            return [node("scalar", value=float(value))] if value.ndim == 0 and not op.num_domain_axes else None
        if isinstance(op, ops.MatMulOp) and all(len(s.shape) >= 2 for s in srcs):
            return [node("matmul", *srcs)]
        if isinstance(op, ops.ElementwiseOp) and op.fn in UNARY + BINARY:
            return [node(op.fn, *srcs)]
        if isinstance(op, ops.PermuteOp):
            return [node("transpose", *srcs, perm=op.axes)]
        if isinstance(op, ops.CatOp) and len(srcs) > 1:
            return [node("concat", *srcs, axis=op.axis)]
        if isinstance(op, ops.ReshapeOp) and all(isinstance(d, int) for d in op.shape):
            return [node("reshape", *srcs, shape=op.shape)]
    except ShapeError:
        return None
    return None


# ---------------------------------------------------------------- graph -> steps
class _Steps:
    """Steps being emitted, with each output's symbolic shape and dtype (inferred as they come,
    so a rewrite that only typed at the stand-in sizes fails here)."""

    def __init__(self, island: Island):
        self.island, self.steps = island, []
        self.types: dict[tuple[int, int], tuple[tuple, str]] = {
            (-1, k): t for k, t in enumerate(zip(island.in_shapes, island.in_dtypes))}

    def emit(self, op: ops.Op, inputs: list) -> tuple[int, int]:
        """A new step running ``op``, typed by the shape rules (the island's last line as its site)."""
        shapes, dtypes = [self.types[r][0] for r in inputs], [self.types[r][1] for r in inputs]
        try:
            made, inferred = infer(op, shapes, dtypes)
        except Exception as err:
            raise Untranslatable(f"{op.name} does not type at every size: {err}") from err
        return self.keep(ops.FusedStep(op, tuple(inputs), tuple(inferred), self.island.op.steps[-1].site,
                                       "", tuple(made)))

    def keep(self, step: ops.FusedStep) -> tuple[int, int]:
        """``step`` as the next step, with the shapes and dtypes it already carries."""
        j = len(self.steps)
        self.steps.append(step)
        for k, typed in enumerate(zip(step.shapes, step.dtypes)):
            self.types[(j, k)] = typed
        return (j, 0)


def to_steps(graph: Graph, island: Island, sizes: dict[str, int]) -> ops.FusedOp:
    """The rewritten graph as the island's steps (Untranslatable where it cannot be)."""
    stand_ins = set(sizes.values()) | {DEFAULT_SIZE}
    out = _Steps(island)
    refs: dict[int, tuple[int, int]] = {}
    kept: dict[int, int] = {}                    # original step -> its position among the new steps
    for n in graph.topo():
        src = [refs[id(s)] for s in n.src]
        if n.op == "input":
            refs[id(n)] = (-1, int(n.attr("name")[2:]))
        elif n.op == "opaque":
            j = int(n.attr("proto")[4:])
            if j not in kept:
                kept[j] = out.keep(replace(island.op.steps[j], inputs=tuple(src)))[0]
            refs[id(n)] = (kept[j], n.attr("index"))
        else:
            refs[id(n)] = _emit_node(n, src, out, stand_ins)
    outputs = []
    for o in graph.outputs:
        ref = refs[id(o)]
        if ref[0] < 0:   # an island output that is now one of its inputs (a dropped cast)
            ref = out.emit(ops.IdentOp(), [ref])
        outputs.append(ref)
    return ops.FusedOp(tuple(out.steps), tuple(outputs))


def _emit_node(n: Node, src: list, out: _Steps, stand_ins: set[int]) -> tuple[int, int]:
    if n.op == "scalar":
        return out.emit(ops.ConstOp(ops.Array(np.asarray(n.attr("value"), np.float32))), [])
    if n.op in UNARY + BINARY:
        return out.emit(ops.ElementwiseOp(n.op), src)
    if n.op == "matmul":
        made = out.emit(ops.MatMulOp(), src[:2])
        if len(src) == 3:
            made = out.emit(ops.ElementwiseOp("add"), [made, src[2]])
        act = n.attr("act")
        return out.emit(ops.ElementwiseOp(act), [made]) if act != "none" else made
    if n.op == "transpose":
        return out.emit(ops.PermuteOp(tuple(n.attr("perm"))), src)
    if n.op == "concat":
        return out.emit(ops.CatOp(n.attr("axis")), src)
    if n.op == "reshape" and not stand_ins & set(n.attr("shape")):
        return out.emit(ops.ReshapeOp(tuple(n.attr("shape"))), src)
    if n.op == "slice" and not stand_ins & {n.attr("start"), n.attr("end")}:
        shape = out.types[src[0]][0]
        lead = [make_slice(0, d) for d in shape[:len(shape) + n.attr("axis")]]
        return out.emit(ops.SpatialIndexOp((*lead, make_slice(n.attr("start"), n.attr("end")))), src)
    raise Untranslatable(f"no island step for the rewritten graph's {n.op}")


# ---------------------------------------------------------------- search and checks
@dataclass
class Outcome:
    """What happened to one island: its steps before and after, the rules applied, and,
    where the island was kept as it was, why."""

    op: ops.FusedOp
    steps_before: int
    applied: list[str]
    kept: str = ""

    @property
    def steps_after(self) -> int:
        return len(self.op.steps)


def optimise(island: Island, search, budget_s: float, sizes: dict[str, int], domain: list[str],
             rules, model) -> Outcome:
    """``island`` rewritten by ``search`` (a cost-model search of :mod:`tempo.superopt.search`)
    within ``budget_s``; the island itself wherever the result fails a check.

    ``domain`` names the island's step symbols, outermost first: the numerical check
    runs both islands at the point where each is 0, with each bound at a size the
    search did not use.
    """
    before = len(island.op.steps)
    graph = to_graph(island, sizes)
    with np.errstate(all="ignore"):          # operators are timed on random inputs
        result = search(graph, rules, budget_s, model=model)
    try:
        new = to_steps(result.graph, island, sizes)
        _check_shapes(island, new)
        _check_values(island, new, domain, sizes)
    except Untranslatable as err:
        return Outcome(island.op, before, [], str(err))
    return Outcome(new, before, result.applied)


def _check_shapes(island: Island, new: ops.FusedOp) -> None:
    got = Island(new, island.in_shapes, island.in_dtypes).output_shapes()
    for a, b in zip(island.output_shapes(), got):
        if len(a) != len(b) or not all(same_size(x, y) for x, y in zip(a, b)):
            raise Untranslatable(f"an output's shape changed from {a} to {b}")


def _check_values(island: Island, new: ops.FusedOp, domain: list[str], sizes: dict[str, int]) -> None:
    from tempo.runtime.backends.numpy import KERNELS

    symbols = island.symbols()
    bounds = sorted(name for name, kind in symbols.items() if kind == "bound")
    trial = {**{name: 0 for name, kind in symbols.items() if kind != "bound"}, **dict.fromkeys(domain, 0),
             **dict(zip(bounds, _primes(len(bounds), set(sizes.values()))))}
    rng = np.random.default_rng(0)
    feeds = []
    for shape, dtype in zip(island.in_shapes, island.in_dtypes):
        try:
            dims = tuple(int(simplify(as_expr(d).substitute(
                {s: trial[s.name] for s in as_expr(d).free_symbols()})).value) for d in shape)
        except (KeyError, ValueError) as err:
            raise Untranslatable(f"an input's shape {shape} names a symbol the check has no value for") from err
        if np.issubdtype(np.dtype(dtype), np.floating):
            feeds.append(rng.standard_normal(dims).astype(dtype))
        else:
            feeds.append(rng.integers(0, 2, dims).astype(dtype))
    point = (0,) * len(domain)
    try:
        with np.errstate(all="ignore"):
            want = KERNELS[ops.FusedOp](island.op)(feeds, trial, point)
            got = KERNELS[ops.FusedOp](new)(feeds, trial, point)
    except Exception as err:
        raise Untranslatable(f"the numerical check could not run: {err}") from err
    for a, b in zip(want, got):
        a, b = np.asarray(a), np.asarray(b)
        same = a.shape == b.shape and (np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
                                       if np.issubdtype(a.dtype, np.floating) else np.array_equal(a, b))
        if not same:
            raise Untranslatable("the rewritten island computes different values")


def _primes(count: int, avoid: set[int]) -> list[int]:
    out, n = [], 5
    while len(out) < count:
        if all(n % p for p in range(2, n)) and n not in avoid:
            out.append(n)
        n += 1
    return out
