"""The operator set of the symbolic dependence graph, as frozen dataclasses.

An operator is plain data; where it is executed (its temporal domain), what it
reads (its edges) and what it produces (shapes and dtypes) live on the SDG node.
Parameters may be symbolic expressions (a reshape to ``(T - t, 4)``, a spatial
index ``t``); they are evaluated at run time at the node's current point.
Shape and dtype inference rules live in :mod:`tempo.ir.shapes`, one per op type.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator

import numpy as np

from tempo.symbolic.expr import Expr

Shape = tuple  # of int | Expr


class Array:
    """A NumPy array held by identity inside a frozen op (no value hashing)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __repr__(self) -> str:
        return f"array{self.array.shape}:{self.array.dtype}"


@dataclass(frozen=True)
class Op:
    """Base class; ``num_outputs`` is 1 unless the op says otherwise."""

    @property
    def num_outputs(self) -> int:
        return 1

    @property
    def name(self) -> str:
        return type(self).__name__

    def exprs(self) -> Iterator[Expr]:
        """The symbolic expressions among the op's parameters (those in tuples included)."""
        for f in fields(self):
            yield from _exprs_in(getattr(self, f.name))


def _exprs_in(value) -> Iterator[Expr]:
    if isinstance(value, Expr):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _exprs_in(item)


@dataclass(frozen=True)
class ConstOp(Op):
    """A constant; its leading ``num_domain_axes`` axes are indexed by the node's point."""

    value: Array
    num_domain_axes: int = 0


@dataclass(frozen=True)
class EvalSymbolOp(Op):
    """The runtime value of a symbolic expression, as an int64 scalar.

    After vectorization, ``vectorized`` dims of the expression are leading
    axes of the result (outermost first), one entry per point of each.
    """

    expr: Expr
    vectorized: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class RandomOp(Op):
    """Counter-based random numbers: a pure function of (stream, point, element).

    ``dist`` is ``uniform`` (on [0, 1)) or ``normal`` (standard); ``dims``
    are the step symbols the numbers vary over (the node's domain), and
    ``offsets`` (one per dim) are added to the point's coordinates (a resumed
    run's ``Context(start=...)``). The same program gives the same numbers
    whatever the schedule or backend.
    """

    shape: Shape
    dtype: str
    dist: str
    stream: int
    dims: tuple[Expr, ...] = ()
    offsets: tuple[int, ...] = ()
    vectorized: tuple[Expr, ...] = ()  # dims of ``dims`` that are leading axes (outermost first)


@dataclass(frozen=True)
class ElementwiseOp(Op):
    """A NumPy-style broadcasting map: ``fn`` names the function (``add``, ``exp``, ``where``...)."""

    fn: str


@dataclass(frozen=True)
class ReduceOp(Op):
    """``sum``, ``mean``, ``max`` or ``min`` over ``axes``.

    ``ordered``: a reduced axis holds the steps of a dim the program loops over, and a sum or a
    mean adds along each reduced axis in index order (see :mod:`tempo.transforms.step_order`).
    """

    fn: str
    axes: tuple[int, ...]
    keepdims: bool = False
    ordered: bool = False


@dataclass(frozen=True)
class CumSumOp(Op):
    axis: int


@dataclass(frozen=True)
class DiscountedSumOp(Op):
    """``sum_k gamma**k x[k]`` along ``axis`` (the axis is removed); ``ordered``: the terms are
    added in index order (the axis holds a loop dim's steps, see :mod:`tempo.transforms.step_order`)."""

    gamma: float
    axis: int
    ordered: bool = False


@dataclass(frozen=True)
class ScanOp(Op):
    """Running sums along ``axis``: ``out[k] = x[k] + gamma * out[k - 1]``, or with
    ``reverse`` ``out[k] = x[k] + gamma * out[k + 1]`` (``gamma = 1``: a cumulative sum).

    With ``window = w > 0`` (forward, ``gamma = 1``) each entry sums only the last
    ``w`` inputs: ``out[k] = x[max(0, k - w + 1)] + ... + x[k]``.

    Made by the lifting pass from a reduction over a growing or sliding slice
    read at every step (``x[0:t+1].sum()``, ``r[t:T].discounted_sum(g)``,
    ``x[max(0, t-3):t+1].sum()``), never by user code.
    """

    axis: int
    gamma: float = 1.0
    reverse: bool = False
    window: int = 0


@dataclass(frozen=True)
class LinearScanOp(Op):
    """A first-order linear recurrence along ``axis``: ``out[k] = x[k] + a[k] * out[k - 1]``,
    or with ``reverse`` ``out[k] = x[k] + a[k] * out[k + 1]`` (inputs ``x`` and ``a``; the
    value before the first step is 0). Made by the lifting pass from a placeholder written
    as that recurrence (GAE's advantages), never by user code."""

    axis: int
    reverse: bool = False


@dataclass(frozen=True)
class MatMulOp(Op):
    """``a @ b`` (NumPy's ``matmul``).

    ``ordered_rows``: axes of ``a`` (its batch axes or its row axis, non-negative) that hold the
    steps of a dim the program loops over: each row of the product is computed the same way
    however many rows the product has. ``ordered_inner``: the contracted axis holds such steps,
    added in index order (see :mod:`tempo.transforms.step_order`).
    """

    ordered_rows: tuple[int, ...] = ()
    ordered_inner: bool = False


@dataclass(frozen=True)
class AttentionOp(Op):
    """Softmax attention of a block of queries: ``q`` (..., R, d), ``k`` (..., S, d), ``v`` (..., S, e)
    -> (..., R, e), the leading axes broadcast (grouped-query attention: ``k`` and ``v`` of size 1
    along the query groups' axis).

    Query row ``i`` is at position ``rows + i`` and key row ``j`` at ``cols + j``; a query sees the
    keys at its own position and before (and, with ``window`` > 0, after its position minus
    ``window``): ``out = softmax(scale * q @ k^T over the keys it sees) @ v``. A query that sees no
    key gives NaN. With ``last``, the queries are the last ``R`` of the keys' positions (``rows``
    is ``cols + S - R``, whatever ``S``): a chunk of queries over the keys up to its own, however
    many come before it. The prompt's attention, chunk by chunk, is made of these ops
    (:func:`tempo.api.functional.attention`).
    """

    scale: float
    rows: int = 0
    cols: int = 0
    window: int = 0
    last: bool = False

    def seen(self, queries: int, keys: int) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``queries`` query rows, the key rows it sees as a range ``[lo, hi)`` of the
        ``keys`` (int64 arrays)."""
        first = self.cols + keys - queries if self.last else self.rows
        position = first + np.arange(queries, dtype=np.int64)
        hi = np.clip(position - self.cols + 1, 0, keys)
        lo = np.clip(position - self.window + 1 - self.cols, 0, keys) if self.window else np.zeros_like(hi)
        return lo, hi

    def visible(self, queries: int, keys: int) -> np.ndarray:
        """(queries, keys) bool: whether each query row sees each key row (:meth:`seen`)."""
        lo, hi = self.seen(queries, keys)
        j = np.arange(keys)
        return (j >= lo[:, None]) & (j < hi[:, None])


@dataclass(frozen=True)
class BatchContractOp(Op):
    """``sum over the batch axes of a @ b``: ``(*batch, m, k), (*batch, k, n) -> (m, n)``, one
    product contracting the batch axes with ``k``. Made by the contraction pass, never by user code.

    ``ordered``: the batch axes that hold the steps of a dim the program loops over, added in
    index order (see :mod:`tempo.transforms.step_order`).
    """

    ordered: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReshapeOp(Op):
    shape: Shape


@dataclass(frozen=True)
class PermuteOp(Op):
    axes: tuple[int, ...]


@dataclass(frozen=True)
class ExpandOp(Op):
    shape: Shape


@dataclass(frozen=True)
class SqueezeOp(Op):
    axis: int


@dataclass(frozen=True)
class UnsqueezeOp(Op):
    axis: int


@dataclass(frozen=True)
class CatOp(Op):
    axis: int


@dataclass(frozen=True)
class SpatialIndexOp(Op):
    """Basic indexing: one item per leading axis, each a point or ``slice`` expression."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class ArgSortOp(Op):
    """The indices (int64) that sort ``x`` along ``axis``, ties in index order (a stable sort)."""

    axis: int


@dataclass(frozen=True)
class TakeOp(Op):
    """``x`` at the int indices of a 1-D tensor along ``axis`` (NumPy's ``take``): a gather of rows.

    With ``batch`` > 0, the first ``batch`` axes of ``x`` and of the indices pair up (vectorization
    adds them): each batch entry takes its own indices, as NumPy's ``take_along_axis`` does.
    """

    axis: int
    batch: int = 0


@dataclass(frozen=True)
class PadOp(Op):
    """Zero padding of ``axis`` by ``before`` and ``after`` entries (sizes may be symbolic)."""

    axis: int
    before: Expr
    after: Expr


@dataclass(frozen=True)
class CastOp(Op):
    dtype: str


@dataclass(frozen=True)
class IdentOp(Op):
    """Copies its input; materialises a temporal access as its own tensor.

    With ``stop_gradient``, autodiff treats the copy as a constant.
    """

    stop_gradient: bool = False


@dataclass(frozen=True)
class MergeOp(Op):
    """Moves the first input whose edge condition holds to its output.

    Branching recurrent tensors (placeholders) and conditional indexing both
    become MergeOps; ``placeholder`` marks the former, whose branches must
    cover the whole domain.
    """

    placeholder: bool = False
    broadcast: tuple[int, ...] = ()  # inputs whose value is broadcast to the output shape (vectorization)


@dataclass(frozen=True)
class UDFOp(Op):
    """A user-defined function ``fn(*arrays) -> tuple of arrays`` run by the host.

    ``batched`` says ``fn`` also accepts a leading batch axis on every input
    and then returns one on every output (so a vectorized dim can call it
    once for all its points); otherwise it is called point by point.
    """

    fn: Callable[..., Any]
    out_shapes: tuple[Shape, ...]
    out_dtypes: tuple[str, ...]
    label: str = "udf"
    batched: bool = False

    @property
    def num_outputs(self) -> int:
        return len(self.out_shapes)


STOP_LABEL = "stop_when"  # the label of ``tpo.stop_when``'s check (scheduled before the next step)


class StopRun(Exception):
    """Raised by a host function (``tpo.stop_when``'s check) to end the run where it is:
    nothing scheduled after that launch runs, what was computed stays. ``point``: dim name -> step."""

    def __init__(self, point: dict[str, int]):
        super().__init__(f"run stopped at {point}")
        self.point = point


COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not")


@dataclass(frozen=True)
class FusedStep:
    """One op of a fused island: its inputs are ``(-1, k)`` (the island's input ``k``)
    or ``(j, out)`` (output ``out`` of step ``j``, an earlier step); ``shapes`` are
    its outputs' (symbolic) shapes."""

    op: Op
    inputs: tuple[tuple[int, int], ...]
    dtypes: tuple[str, ...]
    site: Any = None
    label: str = ""
    shapes: tuple = ()


@dataclass(frozen=True)
class FusedOp(Op):
    """A static island: ops that run at the same points, as one kernel.

    Built by :mod:`tempo.transforms.fuse`. The steps run in order on the
    island's inputs; ``outputs`` names the step outputs the island exposes
    (those read outside it or fetched). Values passed between steps are never
    stored, and the island costs one launch per point instead of one per op.
    """

    steps: tuple[FusedStep, ...]
    outputs: tuple[tuple[int, int], ...]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)
