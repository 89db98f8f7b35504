"""Algebraic simplification: local rewrite rules over the SDG, with symbolic shapes.

:data:`RULES` is a table of ``(name, op type, op fields) -> rewrite``: a
rewrite looks at one node (and, through :class:`Match`, at the nodes it
reads) and answers with one of

* :class:`Value` — the node's output *is* this read (``x * 1`` is ``x``):
  its readers read that instead, through the composition of the two
  dependence expressions (:func:`tempo.transforms.editing.compose`), and the
  node goes;
* :class:`Rebuild` — the node becomes another op over other reads
  (``reshape(reshape(x))`` is one reshape of ``x``), keeping its id.

A rewrite is only committed if it keeps the node's shapes and dtypes (the
engine re-infers them), so a rule may ignore broadcasting and dtype
promotion: ``x * 1`` with a ``1`` of a larger shape, or an int ``x`` times a
float ``1``, is simply left alone. Rules run to a fixpoint over a worklist,
sources before readers.

The default rules are exact on every value but the sign of zero (``x + 0``
turns ``-0.0`` into ``x``'s ``-0.0`` where NumPy gives ``+0.0``). Rules that
are exact only on finite, positive or non-NaN values (``exp(log x)``,
``log(exp x)``, ``x - x``, ``x * 0``) run with ``Config(fast_math=True)``.
Every rule can be left out by name (``Config(skip={"broadcast removal"})``).

**Matmul re-association** (TEMPO §4.1). For ``(A @ B) @ C`` against
``A @ (B @ C)`` (the inner product read only here) the cost is counted in
multiply-adds from the operands' symbolic shapes; ``A`` of ``(m, k)``,
``B`` of ``(k, n)`` and ``C`` of ``(n, p)`` cost ``mkn + mnp`` one way and
``knp + mkp`` the other. When the prover (:func:`prove_nonneg`) shows that
one way is never cheaper, the cheaper one is built. When the answer
depends on sizes only known at run time (a bound ``T``, or a step ``t``
in a shape such as ``(T - t, 16)``), both are built and a ``MergeOp``
takes, at each point, the one the condition ``cost_1 <= cost_2`` picks:
the scheduler executes only the branch taken at each point, so the
program pays for the cheaper product wherever it runs, for any bounds it
runs with. The condition must be affine in the symbols (isl decides where
each branch runs); otherwise the product stays as written. The new inner
product runs over just the dims its operands vary with, so ``B @ C`` of
two loop-invariant matrices is computed once, not at every step.

**Broadcast removal**: an ``ExpandOp`` read by an elementwise op that
broadcasts its operands to the same shape anyway is skipped; the expand
is left to dead-code elimination when nothing else reads it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.ir import ops
from tempo.ir.sdg import SDG, Edge, Node
from tempo.ir.shapes import infer, same_size
from tempo.symbolic.expr import Expr, as_expr, seq
from tempo.symbolic.simplify import linear_form, prove_nonneg, simplify
from tempo.transforms.editing import Graph, Read, compose, same_shape, sources_first


@dataclass(frozen=True)
class Config:
    """``fast_math``: also the rules exact only on finite, positive or non-NaN values;
    ``skip``: names of rules (see :data:`RULES`) to leave out."""

    fast_math: bool = False
    skip: frozenset = field(default_factory=frozenset)


@dataclass(frozen=True)
class Value:
    """The node's output is ``read`` (over the node's dims)."""

    read: Read


@dataclass(frozen=True)
class Rebuild:
    """The node becomes ``op`` over ``reads`` (over the node's dims)."""

    op: ops.Op
    reads: tuple[Read, ...]


def apply(sdg: SDG, cfg: Config = Config()) -> SDG:
    """The SDG with every rule applied to a fixpoint (``sdg`` itself when none applies)."""
    new, fired = rewrite(sdg, cfg)
    return new if fired else sdg


def rewrite(sdg: SDG, cfg: Config = Config()) -> tuple[SDG, Counter]:
    """The simplified SDG and how often each rule fired."""
    unknown = set(cfg.skip) - {r.name for r in RULES}
    if unknown:
        raise TempoError(f"simplify.Config(skip=...) names {', '.join(sorted(unknown))}, not a rule; "
                         f"the rules are {', '.join(r.name for r in RULES)}")
    rules = [r for r in RULES if r.name not in cfg.skip and (cfg.fast_math or not r.fast_math)]
    return _Engine(Graph(sdg), rules).run()


# ----- matching -----
class Match:
    """A node as one rule sees it; ``via`` is the edge a reader reads it through, when it is
    looked at from that reader (its reads are then composed into the reader's dims)."""

    def __init__(self, g: Graph, node: Node, via: Edge | None = None, settled: set | None = None):
        self.g, self.node, self.via = g, node, via
        self.op = node.op
        self.edges = g.inputs(node.id)
        self.settled = settled if settled is not None else set()  # nodes the re-association made

    def read(self, k: int) -> Read | None:
        """Input ``k`` as a read (over the reader's dims when seen through ``via``)."""
        e = self.edges[k]
        if self.via is None:
            return Read(e.src, e.src_out, e.index, e.cond)
        if e.cond is not None or self.via.cond is not None:
            return None
        index = compose(e.index, self.node.domain, self.via.index)
        return None if index is None else Read(e.src, e.src_out, index)

    def shape(self, k: int) -> tuple:
        return self.g.read_shape(self.edges[k])

    def input(self, k: int, *op_types: type) -> Match | None:
        """The node input ``k`` reads, when it is one of ``op_types``, seen from here."""
        if self.via is not None:
            return None
        e = self.edges[k]
        src = self.g.nodes[e.src]
        if not isinstance(src.op, op_types) or src.op.num_outputs != 1 or e.cond is not None:
            return None
        return Match(self.g, src, e, self.settled)

    def readers(self) -> int:
        return len(self.g.outs[self.node.id]) + self.g.is_root(self.node.id)

    def const(self, k: int):
        """The single value of input ``k`` when it is a constant with all entries equal, else None."""
        src = self.g.nodes[self.edges[k].src]
        while isinstance(src.op, _UNIFORM_VIEWS):
            src = self.g.nodes[self.g.inputs(src.id)[0].src]
        if not isinstance(src.op, ops.ConstOp):
            return None
        array = src.op.value.array
        if array.size == 0 or not (array == array.flat[0]).all():
            return None
        return array.flat[0].item()

    def same_read(self, j: int, k: int) -> bool:
        a, b = self.edges[j], self.edges[k]
        return a.src == b.src and a.src_out == b.src_out and a.index is b.index and a.cond is b.cond


_UNIFORM_VIEWS = (ops.ExpandOp, ops.ReshapeOp, ops.UnsqueezeOp, ops.SqueezeOp, ops.PermuteOp)


# ----- the engine -----
class _Engine:
    def __init__(self, g: Graph, rules: list):
        self.g, self.fired = g, Counter()
        self.by_type: dict[type, list] = {}
        for r in rules:
            self.by_type.setdefault(r.op_type, []).append(r)
        self.settled: set[int] = set()

    def run(self) -> tuple[SDG, Counter]:
        work = sources_first(self.g)
        queued = set(work)
        budget = 20 * len(self.g.nodes) + 100
        while work and budget:
            budget -= 1
            n = work.pop()
            queued.discard(n)
            touched = self.visit(n) if n in self.g.nodes else []
            for m in touched:
                if m not in queued and m in self.g.nodes:
                    work.append(m)
                    queued.add(m)
        return self.g.to_sdg(), self.fired

    def visit(self, n: int) -> list[int]:
        node = self.g.nodes[n]
        if n in self.g.vectorized:
            return []
        for r in self.by_type.get(type(node.op), ()):
            if any(getattr(node.op, k) != v for k, v in r.fields.items()):
                continue
            result = r.fn(Match(self.g, node, settled=self.settled))
            if result is None:
                continue
            touched = self.commit(node, result)
            if touched is not None:
                self.fired[r.name] += 1
                return touched
        return []

    def commit(self, node: Node, result) -> list[int] | None:
        g = self.g
        if isinstance(result, Value):
            read = result.read
            if len(node.shapes) != 1 or not same_shape(g.read_shape(read), node.shapes[0]) \
                    or g.dtype(read) != node.dtypes[0]:
                return None
            readers = [e.sink for e in g.readers(node.id)]
            if not g.replace_uses(node.id, {0: read}):
                return None
            if not g.is_root(node.id):
                g.remove(node.id)
            return readers
        if not _fits(g, node, result.op, result.reads):
            return None
        g.set_node(replace(node, op=result.op))
        g.set_inputs(node.id, list(result.reads))
        return [node.id] + [e.sink for e in g.readers(node.id)]


def _fits(g: Graph, node: Node, op: ops.Op, reads) -> bool:
    """Whether ``op`` over ``reads`` gives ``node``'s shapes and dtypes, reading only its dims."""
    steps = {d for d in node.domain}
    for r in reads:
        for what in (r.index, r.cond):
            if what is not None and any(s.kind == "step" and s not in steps for s in what.free_symbols()):
                return False
    try:
        shapes, dtypes = infer(op, [g.read_shape(r) for r in reads], [g.dtype(r) for r in reads])
    except TempoError:
        return False
    return (len(shapes) == len(node.shapes) and all(same_shape(a, b) for a, b in zip(shapes, node.shapes))
            and tuple(dtypes) == tuple(node.dtypes))


# ----- the rules -----
@dataclass(frozen=True)
class Rule:
    name: str
    op_type: type
    fields: dict
    fn: Callable[[Match], Value | Rebuild | None]
    fast_math: bool = False


def _identity(value, operand: int):
    """``x op c`` is ``x`` when the constant operand (the other one) equals ``value``."""
    def rewrite(m: Match):
        other = 1 - operand
        if len(m.edges) == 2 and m.const(other) is not None and m.const(other) == value:
            return Value(m.read(operand))
        return None

    return rewrite


def _undoes(fn: str):
    """``f(g(x))`` is ``x`` where ``g`` is the elementwise ``fn``: ``--x``, ``exp(log x)``..."""
    def rewrite(m: Match):
        inner = m.input(0, ops.ElementwiseOp)
        if inner is None or inner.op.fn != fn:
            return None
        read = inner.read(0)
        return Value(read) if read is not None else None

    return rewrite


def _same_operands(m: Match):
    """``max(x, x)``, ``x & x``, ``where(c, x, x)`` are ``x``."""
    last = len(m.edges) - 1
    return Value(m.read(last)) if last >= 1 and m.same_read(last - 1, last) else None


def _where_const(m: Match):
    """``where(True, x, y)`` is ``x``, ``where(False, x, y)`` is ``y``."""
    cond = m.const(0)
    if cond is None or len(m.edges) != 3:
        return None
    return Value(m.read(1 if cond else 2))


def _zeros(m: Match):
    """``x - x`` or ``x * 0``: zeros of the node's shape (NaN and infinity become 0)."""
    def zero_like() -> Rebuild:
        (shape,), (dtype,) = m.node.shapes, m.node.dtypes
        const = m.g.add_node(ops.ConstOp(ops.Array(np.zeros((), dtype=dtype))), (), ((),), (dtype,), m.node)
        return Rebuild(ops.ExpandOp(tuple(shape)), (Read(const.id, 0, seq()),))

    if m.op.fn == "sub" and m.same_read(0, 1):
        return zero_like()
    if m.op.fn == "mul" and any(c == 0 for c in (m.const(0), m.const(1)) if c is not None):
        return zero_like()
    return None


def _to_itself(m: Match):
    """A copy (``ident``), or a cat of one tensor, is its input."""
    return Value(m.read(0)) if len(m.edges) == 1 else None


def _one_branch(m: Match):
    """A merge of a single branch that always holds (a gradient with one contribution) is that
    branch; unless it is the only merge on some cycle (``a[t] = b[t] + 1; b[t] = a[t] * 2`` must
    still reach the scheduler as a cycle through merges, to be reported)."""
    if len(m.edges) != 1 or m.edges[0].cond is not None or m.op.broadcast:
        return None
    return Value(m.read(0)) if not _only_merge_on_a_cycle(m.g, m.node.id) else None


def _only_merge_on_a_cycle(g: Graph, n: int) -> bool:
    """Whether ``n``'s input reaches ``n`` again through nodes that are not merges."""
    stack, seen = [e.src for e in g.inputs(n)], set()
    while stack:
        m = stack.pop()
        if m == n:
            return True
        if m in seen or isinstance(g.nodes[m].op, ops.MergeOp):
            continue
        seen.add(m)
        stack.extend(e.src for e in g.inputs(m))
    return False


def _cast(m: Match):
    """A cast to the dtype its input already has is the input."""
    return Value(m.read(0)) if m.g.dtype(m.edges[0]) == m.op.dtype else None


def _pad(m: Match):
    """A zero padding by 0 entries on either side is the input."""
    widths = [simplify(as_expr(x)) for x in (m.op.before, m.op.after)]
    return Value(m.read(0)) if all(w.is_const and w.value == 0 for w in widths) else None


def _same_shape_view(m: Match):
    """A reshape or expand to the input's own shape is the input."""
    return Value(m.read(0)) if same_shape(m.shape(0), m.node.shapes[0]) else None


_VIEWS = (ops.ReshapeOp, ops.SqueezeOp, ops.UnsqueezeOp)


def _view_chain(m: Match):
    """A reshape, squeeze or unsqueeze of one of them is one reshape of the first input."""
    inner = m.input(0, *_VIEWS)
    read = inner.read(0) if inner is not None else None
    return Rebuild(ops.ReshapeOp(tuple(m.node.shapes[0])), (read,)) if read is not None else None


def _permute(m: Match):
    """The identity permutation is the input; a permute of a permute is one permute."""
    axes = m.op.axes
    if tuple(axes) == tuple(range(len(axes))):
        return Value(m.read(0))
    inner = m.input(0, ops.PermuteOp)
    read = inner.read(0) if inner is not None else None
    if read is None:
        return None
    return Rebuild(ops.PermuteOp(tuple(inner.op.axes[a] for a in axes)), (read,))


def _expand_chain(m: Match):
    """An expand of an expand is one expand of the first input."""
    inner = m.input(0, ops.ExpandOp)
    read = inner.read(0) if inner is not None else None
    return Rebuild(m.op, (read,)) if read is not None else None


def _reduce(m: Match):
    """A reduction over no axis, or over axes of size 1, is its input (reshaped)."""
    shape = m.shape(0)
    axes = {a % len(shape) for a in m.op.axes} if shape else set()
    if any(not (isinstance(shape[a], int) and shape[a] == 1) for a in axes):
        return None
    if m.op.keepdims or not axes:
        return Value(m.read(0))
    return Rebuild(ops.ReshapeOp(tuple(m.node.shapes[0])), (m.read(0),))


def _full_index(m: Match):
    """``x.spatial[0:n]`` over the whole of each axis is ``x``."""
    shape = m.shape(0)
    for item, n in zip(m.op.items, shape):
        if item.op != "slice" or not same_size(item.args[0], 0) or not same_size(item.args[1], n):
            return None
    return Value(m.read(0))


def _broadcast_removal(m: Match):
    """An elementwise op reads an expand's input instead where it broadcasts to the same shape."""
    for k in range(len(m.edges)):
        inner = m.input(k, ops.ExpandOp)
        read = inner.read(0) if inner is not None else None
        if read is None:
            continue
        reads = tuple(read if j == k else m.read(j) for j in range(len(m.edges)))
        if _fits(m.g, m.node, m.op, reads):
            return Rebuild(m.op, reads)
    return None


# ----- matmul re-association -----
def _reassociate(m: Match):
    """``(A @ B) @ C`` against ``A @ (B @ C)``, by their symbolic cost (see the module docstring)."""
    if m.node.id in m.settled:
        return None
    for side in (0, 1):
        inner = m.input(side, ops.MatMulOp)
        if inner is None or inner.readers() != 1 or inner.node.id in m.settled:
            continue
        reads = [inner.read(0), inner.read(1)]
        if None in reads:
            continue
        operands = reads + [m.read(1)] if side == 0 else [m.read(0)] + reads
        shapes = [m.g.read_shape(r) for r in operands]
        if any(len(s) != 2 for s in shapes):
            continue
        (rows, k), (_, n), (_, cols) = shapes
        left, right = rows * k * n + rows * n * cols, k * n * cols + rows * k * cols
        now, other = (left, right) if side == 0 else (right, left)
        extra = simplify(as_expr(now - other))
        if prove_nonneg(-extra):
            continue
        return _rebuilt(m, operands, side, extra)
    return None


def _rebuilt(m: Match, operands: list[Read], side: int, extra: Expr):
    """The other association, or (when the cost depends on sizes) both, merged by cost at each point."""
    g, node = m.g, m.node
    a, b, c = operands
    pair = (b, c) if side == 0 else (a, b)
    inner = _product(g, node, pair)
    other = (a, inner) if side == 0 else (inner, c)
    if prove_nonneg(extra - 1):
        return Rebuild(ops.MatMulOp(), other)
    cond = _solved(simplify(extra <= 0))
    if cond.op not in ("le", "lt") or not _affine(cond):
        g.remove(inner.src)
        return None
    kept = [m.read(0), m.read(1)]
    same = g.add_node(ops.MatMulOp(), node.domain, node.shapes, node.dtypes, node)
    g.set_inputs(same.id, kept)
    swapped = g.add_node(ops.MatMulOp(), node.domain, node.shapes, node.dtypes, node)
    g.set_inputs(swapped.id, list(other))
    m.settled.update({same.id, swapped.id, inner.src, node.id})
    here = seq(*node.domain)
    return Rebuild(ops.MergeOp(), (Read(same.id, 0, here, cond), Read(swapped.id, 0, here)))


def _product(g: Graph, like: Node, pair) -> Read:
    """A new node computing ``pair[0] @ pair[1]`` over the dims its reads mention, read at the point."""
    steps = set()
    for r in pair:
        steps |= {s for s in r.index.free_symbols() if s.kind == "step"}
    domain = tuple(d for d in like.domain if d in steps)
    (shape,), (dtype,) = infer(ops.MatMulOp(), [g.read_shape(r) for r in pair], [g.dtype(r) for r in pair])
    node = g.add_node(ops.MatMulOp(), domain, (shape,), (dtype,), like)
    g.set_inputs(node.id, list(pair))
    return Read(node.id, 0, seq(*domain))


def _solved(cond: Expr) -> Expr:
    """``c*s + k <= 0`` over one symbol ``s`` as a bound on ``s`` (``t*640 - 3456 <= 0`` is ``t <= 5``)."""
    if cond.op != "le" or not cond.args[1].is_const:
        return cond
    form = linear_form(simplify(cond.args[0] - cond.args[1]))
    atoms = [a for a in form if a is not None]
    if len(atoms) != 1 or atoms[0].op != "sym":
        return cond
    (s,), c, k = atoms, form[atoms[0]], form.get(None, 0)
    return s <= (-k) // c if c > 0 else -(k // c) <= s


def _affine(cond: Expr) -> bool:
    """Whether isl can take ``cond`` (a comparison of sums of symbols times constants)."""
    return all(k is None or k.op == "sym" for side in cond.args for k in linear_form(side))


def _rule(name: str, op_type: type, rewrite, fast_math: bool = False, **fields) -> Rule:
    return Rule(name, op_type, fields, rewrite, fast_math)


E = ops.ElementwiseOp
RULES: tuple[Rule, ...] = (
    _rule("x + 0", E, _identity(0, 0), fn="add"),
    _rule("0 + x", E, _identity(0, 1), fn="add"),
    _rule("x - 0", E, _identity(0, 0), fn="sub"),
    _rule("x * 1", E, _identity(1, 0), fn="mul"),
    _rule("1 * x", E, _identity(1, 1), fn="mul"),
    _rule("x / 1", E, _identity(1, 0), fn="div"),
    _rule("x ** 1", E, _identity(1, 0), fn="pow"),
    _rule("--x", E, _undoes("neg"), fn="neg"),
    _rule("~~x", E, _undoes("not"), fn="not"),
    _rule("max(x, x)", E, _same_operands, fn="maximum"),
    _rule("min(x, x)", E, _same_operands, fn="minimum"),
    _rule("x & x", E, _same_operands, fn="and"),
    _rule("x | x", E, _same_operands, fn="or"),
    _rule("where(c, x, x)", E, _same_operands, fn="where"),
    _rule("where(const, x, y)", E, _where_const, fn="where"),
    _rule("x - x", E, _zeros, fast_math=True, fn="sub"),
    _rule("x * 0", E, _zeros, fast_math=True, fn="mul"),
    _rule("exp(log x)", E, _undoes("log"), fast_math=True, fn="exp"),
    _rule("log(exp x)", E, _undoes("exp"), fast_math=True, fn="log"),
    _rule("broadcast removal", E, _broadcast_removal),
    _rule("cast to its dtype", ops.CastOp, _cast),
    _rule("ident", ops.IdentOp, _to_itself),
    _rule("merge of one branch", ops.MergeOp, _one_branch),
    _rule("cat of one", ops.CatOp, _to_itself),
    _rule("pad by 0", ops.PadOp, _pad),
    _rule("reshape to its shape", ops.ReshapeOp, _same_shape_view),
    _rule("expand to its shape", ops.ExpandOp, _same_shape_view),
    _rule("reshape chain", ops.ReshapeOp, _view_chain),
    _rule("squeeze chain", ops.SqueezeOp, _view_chain),
    _rule("unsqueeze chain", ops.UnsqueezeOp, _view_chain),
    _rule("permute chain", ops.PermuteOp, _permute),
    _rule("expand chain", ops.ExpandOp, _expand_chain),
    _rule("reduce over size 1", ops.ReduceOp, _reduce),
    _rule("whole spatial index", ops.SpatialIndexOp, _full_index),
    _rule("matmul re-association", ops.MatMulOp, _reassociate),
)
