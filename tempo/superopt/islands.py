"""The superoptimiser on a Tempo program's static islands (the fuse pass's FusedOps).

An island's steps become a :class:`~tempo.superopt.graph.Graph`: float32
matmuls, element-wise arithmetic and activations, permutes, concatenations,
static reshapes and scalar constants are translated to the TASO operator set;
every other step becomes an ``opaque`` node that keeps its place in the
dataflow (the rules never match it, the cost model does not count it). Any of
:data:`tempo.superopt.optimize.AGENTS` rewrites the graph through
:func:`~tempo.superopt.optimize.optimize`, so the result computes the same
outputs and is never slower by measurement; the result is translated back to
steps.

Island shapes are symbolic (``(B, 32)`` after vectorization). While an
island is optimised each bound symbol stands for a concrete size (``sizes``,
default :data:`DEFAULT_SIZE`: the run's sizes are the right choice), the size
operators are timed at, and a graph is run (to be measured or compared) by
translating it back to steps and running the NumPy FusedOp kernel, the
runtime's own, at those sizes (:func:`island_backend`). A rewrite is kept only
if it holds at every size: the rewritten steps must infer, symbolically, the
island's own output shapes (a concatenation of ``(B, 32)`` and ``(32, 32)``
that was only legal because ``B`` stood for 32 fails here), and both islands
are run on random inputs at other sizes and must agree. Islands whose shapes
depend on a step (``(T - t, 4)``) are left alone.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, fields, replace

import numpy as np

from tempo.ir import ops
from tempo.ir.shapes import infer, same_size
from tempo.superopt import execute
from tempo.superopt.graph import Graph, Node, ShapeError, node
from tempo.symbolic.expr import Expr, as_expr, make_slice
from tempo.symbolic.simplify import simplify

DEFAULT_SIZE = 16
UNARY = ("relu", "sigmoid", "tanh", "exp", "sqrt")
BINARY = ("add", "sub", "mul", "div")
FLOAT = "float32"


class Untranslatable(Exception):
    """An island, or a rewritten graph, that the translation cannot carry across."""


@dataclass
class Island:
    """A FusedOp with the shapes and dtypes of its inputs (the reads of its node), its
    domain's step names (outermost first) and the size each bound stands for."""

    op: ops.FusedOp
    in_shapes: tuple[tuple, ...]
    in_dtypes: tuple[str, ...]
    domain: tuple[str, ...] = ()
    sizes: dict[str, int] = field(default_factory=dict)

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

    def env(self, bounds: dict[str, int] | None = None) -> dict[str, int]:
        """Values for the island's symbols: every step at 0, every bound at its size
        (or at ``bounds[name]``)."""
        sizes = {**self.sizes, **(bounds or {})}
        return {name: sizes.get(name, DEFAULT_SIZE) if kind == "bound" else 0
                for name, kind in {**self.symbols(), **dict.fromkeys(self.domain, "step")}.items()}

    def output_shapes(self) -> list[tuple]:
        """The shapes of the island's outputs."""
        return [self.op.steps[j].shapes[k] for j, k in self.op.outputs]

    def with_op(self, op: ops.FusedOp) -> Island:
        """The same island (inputs, domain, sizes) with other steps."""
        return replace(self, op=op)

    def kernel(self, op: ops.FusedOp, bounds: dict[str, int] | None = None):
        """``run(inputs) -> outputs``: ``op`` (this island or a rewrite of it) by the NumPy
        runtime's kernel, at step 0 with the bounds of :meth:`env`."""
        from tempo.runtime.backends.numpy import KERNELS

        kernel, env, point = KERNELS[ops.FusedOp](op), self.env(bounds), (0,) * len(self.domain)

        def run(inputs: list) -> tuple:
            with np.errstate(all="ignore"):
                return kernel(inputs, env, point)

        return run


def concrete(shape: tuple, sizes: dict[str, int]) -> tuple[int, ...]:
    """``shape`` with every bound symbol at its size (Untranslatable where a dim depends on a step)."""
    out = []
    for dim in shape:
        expr = simplify(as_expr(dim).substitute({s: sizes.get(s.name, DEFAULT_SIZE)
                                                  for s in as_expr(dim).free_symbols() if s.kind == "bound"}))
        if not expr.is_const:
            raise Untranslatable(f"a shape depends on a step: {shape}")
        out.append(int(expr.value))
    return tuple(out)


# ---------------------------------------------------------------- steps -> graph
def to_graph(island: Island) -> Graph:
    """The island as a superopt graph: inputs ``in0, in1, ...``, one output per island output."""
    inputs = [node("input", name=f"in{k}", shape=concrete(shape, island.sizes))
              for k, shape in enumerate(island.in_shapes)]
    values: dict[tuple[int, int], Node] = {(-1, k): n for k, n in enumerate(inputs)}
    dtypes: dict[tuple[int, int], str] = {(-1, k): d for k, d in enumerate(island.in_dtypes)}
    for j, step in enumerate(island.op.steps):
        srcs = [values[ref] for ref in step.inputs]
        shapes = [concrete(shape, island.sizes) for shape in step.shapes]
        made = _translate(step, srcs, [dtypes[ref] for ref in step.inputs]) or [
            node("opaque", *srcs, proto=f"step{j}".encode(), index=k, shape=shape) for k, shape in enumerate(shapes)]
        for k, n in enumerate(made):
            values[(j, k)], dtypes[(j, k)] = n, step.dtypes[k]
    return Graph(tuple(inputs), tuple(values[ref] for ref in island.op.outputs))


def _translate(step: ops.FusedStep, srcs: list[Node], in_dtypes: list[str]) -> list[Node] | None:
    """The step as TASO nodes, or None where it stays opaque."""
    op = step.op
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


def to_steps(graph: Graph, island: Island) -> ops.FusedOp:
    """The rewritten graph (or a constant-folded one) as the island's steps."""
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
        elif n.op == "weight":
            value = np.asarray(graph.weights[n.attr("name")], np.float32)
            refs[id(n)] = out.emit(ops.ConstOp(ops.Array(value)), [])
        else:
            refs[id(n)] = _emit_node(n, src, out)
    outputs = []
    for o in graph.outputs:
        ref = refs[id(o)]
        if ref[0] < 0:   # an island output that is now one of its inputs (a dropped cast)
            ref = out.emit(ops.IdentOp(), [ref])
        outputs.append(ref)
    return ops.FusedOp(tuple(out.steps), tuple(outputs))


def _emit_node(n: Node, src: list, out: _Steps) -> tuple[int, int]:
    """Steps computing ``n``. A reshape is only emitted on a source of static shape, and a
    slice on an axis of static size: their sizes were read at the stand-in sizes, so on a
    symbolic size they may mean nothing."""
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
    shape = out.types[src[0]][0] if src else ()
    if n.op == "reshape" and all(isinstance(d, int) for d in shape):
        return out.emit(ops.ReshapeOp(tuple(n.attr("shape"))), src)
    if n.op == "slice" and isinstance(shape[n.attr("axis")], int):
        lead = [make_slice(0, d) for d in shape[:len(shape) + n.attr("axis")]]
        return out.emit(ops.SpatialIndexOp((*lead, make_slice(n.attr("start"), n.attr("end")))), src)
    raise Untranslatable(f"no island step for the rewritten graph's {n.op}")


# ---------------------------------------------------------------- running island graphs
def compile_graph(graph: Graph, island: Island):
    """``run(feeds) -> outputs`` for a graph of ``island`` (its rewrites, constant-folded or
    not): the graph as steps, run by the NumPy FusedOp kernel at the island's sizes; each
    input ``in{k}`` is cast to the island's dtype for it."""
    kernel = island.kernel(to_steps(graph, island))
    names = [f"in{k}" for k in range(len(island.in_shapes))]

    def run(feeds) -> list:
        return list(kernel([np.asarray(feeds[name]).astype(dtype, copy=False)
                            for name, dtype in zip(names, island.in_dtypes)]))

    return run


@contextlib.contextmanager
def island_backend(island: Island):
    """Within the block, graphs are run and timed as ``island``'s steps (see :func:`compile_graph`)."""
    previous = execute.default_backend()
    execute.BACKENDS["island"] = ("tempo.superopt.islands", {"island": island})
    execute.set_default_backend("island")
    try:
        yield
    finally:
        execute.set_default_backend(previous)
        del execute.BACKENDS["island"]


# ---------------------------------------------------------------- optimising, and the checks
@dataclass
class Outcome:
    """What happened to one island: its steps before and after, the rules applied, the
    measured latencies (ms, at the island's sizes) and, where the island was kept as it
    was (the cast-free translation aside), why."""

    op: ops.FusedOp
    steps_before: int
    applied: list[str]
    before_ms: float = 0.0
    after_ms: float = 0.0
    kept: str = ""

    @property
    def steps_after(self) -> int:
        return len(self.op.steps)


def optimise(island: Island, agent: str, budget_s: float, rules, **options) -> Outcome:
    """``island`` rewritten by ``agent`` (a name of :data:`tempo.superopt.optimize.AGENTS`)
    within ``budget_s``: the search's graph where it passes every check, else the island
    translated as it is, else the island itself. An island no rule matches is not searched
    (:func:`~tempo.superopt.optimize.optimize`)."""
    from tempo.superopt.optimize import optimize

    before = len(island.op.steps)
    try:
        graph = to_graph(island)
        plain = to_steps(graph, island)
    except Untranslatable as err:
        return Outcome(island.op, before, [], kept=str(err))
    try:
        with island_backend(island), np.errstate(all="ignore"):
            result = optimize(graph, agent, budget_s, rules, **options)
    except Untranslatable as err:        # a graph the search reached cannot be run as steps
        return Outcome(plain, before, [], kept=f"the search reached a graph with no steps: {err}")
    outcome = Outcome(plain, before, [], result.before_ms, result.after_ms, result.reason)
    if result.kept_input:
        return outcome
    try:
        new = to_steps(result.graph, island)
        _check_shapes(island, new)
        _check_values(island, new)
    except Untranslatable as err:
        outcome.kept = str(err)
        return outcome
    return Outcome(new, before, result.applied, result.before_ms, result.after_ms)


def _check_shapes(island: Island, new: ops.FusedOp) -> None:
    got = island.with_op(new).output_shapes()
    for a, b in zip(island.output_shapes(), got):
        if len(a) != len(b) or not all(same_size(x, y) for x, y in zip(a, b)):
            raise Untranslatable(f"an output's shape changed from {a} to {b}")


def _check_values(island: Island, new: ops.FusedOp) -> None:
    """Both islands on the same random inputs, each bound at a prime the island's sizes avoid."""
    bounds = sorted(name for name, kind in island.symbols().items() if kind == "bound")
    trial = dict(zip(bounds, _primes(len(bounds), set(island.sizes.values()) | {DEFAULT_SIZE})))
    env = island.env(trial)
    rng = np.random.default_rng(0)
    feeds = []
    for shape, dtype in zip(island.in_shapes, island.in_dtypes):
        dims = concrete(shape, env)
        if np.issubdtype(np.dtype(dtype), np.floating):
            feeds.append(rng.standard_normal(dims).astype(dtype))
        else:
            feeds.append(rng.integers(0, 2, dims).astype(dtype))
    try:
        want, got = island.kernel(island.op, trial)(feeds), island.kernel(new, trial)(feeds)
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
