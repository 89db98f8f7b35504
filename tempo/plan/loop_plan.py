"""What a device loop's plan is (:mod:`tempo.plan.device_loops` decides it): where each input of a
statement comes from, the loop's steps, what it carries and writes back, and the loops nested in it."""
from __future__ import annotations

from dataclasses import dataclass

from tempo.ir.sdg import Edge, Node
from tempo.schedule import ast
from tempo.symbolic.expr import Expr

CLOSED, GATHERED, LOCAL, CARRIED, ROWS, ROW, STACKED, SLICED, WINDOW = \
    "closed", "gathered", "local", "carried", "rows", "row", "stacked", "sliced", "window"
DEFERRED_LABELS = ("sink", "checkpoint")  # user functions a device loop calls after its launch


@dataclass(frozen=True)
class Source:
    """Where one input of a statement of the loop comes from: ``kind`` is one of
    ``closed``, ``gathered`` (read from ``key``'s store at ``index``), ``local`` or
    ``carried`` (the value ``key`` took ``shift`` iterations earlier, 0 for local), ``rows`` (the rows
    a nested loop wrote in this iteration, read at the slice ``index``), ``row`` (one of them, read at
    the point ``index``), or, for a nested loop, ``stacked`` (the rows another nested loop wrote
    ``shift`` iterations of the enclosing loop earlier, 0: in this one, read row by row) or ``sliced``
    (the rows another nested loop wrote in this iteration, read ``shift`` consecutive rows at a time:
    a tile's rows) or ``window`` (a window of at most ``shift`` rows from the counter on, ``r[t:min(t + n,
    T)]``, read as ``shift`` rows, zeros past the last: of another nested loop's rows of this iteration)."""

    kind: str
    key: tuple[int, int]
    index: Expr | None = None
    shift: int = 0
    edge: Edge | None = None


@dataclass(frozen=True)
class Step:
    """One Execute of the loop body: its node, the ``if`` conditions it runs under, and its inputs
    (a merge's branches in order, with their conditions in ``conds``)."""

    execute: ast.Execute
    node: Node
    guard: tuple[Expr, ...]
    inputs: tuple[Source, ...]
    conds: tuple[Expr | None, ...] = ()


@dataclass(frozen=True)
class LoopPlan:
    """A loop the device runs whole: its steps in body order; ``carried``: (node, output) -> how
    many past iterations' values the body reads; ``written_back``: what is stored after the loop;
    ``frees``: the loop's Free statements of stores that hold something (with their conditions);
    ``end``: the step of the ``tpo.end_when`` check of the loop's dim, if it holds one; ``shaped``: the
    steps whose shapes (their own or their inputs') depend on the counter as a tile's do (see the
    module docstring); ``ending``: the nested loop over a dim that ends at run time, if it holds one;
    ``padded``: the steps that read rows padded past the length of ``padded_dim`` (that dim), in a loop
    that holds it or in a loop nested after it that runs to its bound."""

    loop: ast.Loop
    steps: tuple[Step, ...]
    carried: dict
    written_back: tuple[tuple[int, int], ...]
    frees: tuple[tuple[ast.Free, tuple[Expr, ...]], ...]
    nested: tuple["Nested", ...] = ()
    end: int | None = None
    shaped: tuple[int, ...] = ()
    ending: int | None = None
    padded: tuple[int, ...] = ()
    padded_dim: Expr | None = None

    def signature(self) -> tuple:
        """What a compiled form of this loop depends on besides its AST: where each input comes from,
        what is carried and what is written back (the store choices decide them)."""
        sources = tuple((src.kind, src.key, src.shift) for step in self.steps for src in step.inputs)
        inner = tuple((n.at, n.plan.signature(), tuple((k, s.kind, s.key, s.shift) for k, s in n.inputs))
                      for n in self.nested)
        return sources, tuple(sorted(self.carried.items())), self.written_back, inner, self.end, self.shaped, \
            self.ending, self.padded


@dataclass(frozen=True)
class Nested:
    """A loop of the body run whole at each iteration: its own plan, run before step ``at`` under the
    ``if`` conditions ``guard``; ``inputs``: (the name ``"s.k"`` of each of its closed inputs, where the
    enclosing loop finds it)."""

    plan: LoopPlan
    at: int
    guard: tuple[Expr, ...]
    inputs: tuple[tuple[str, Source], ...]
