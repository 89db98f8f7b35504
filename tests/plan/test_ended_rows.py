"""Which statements compute, before a dim's end, the same from rows padded to its cap
(:mod:`tempo.plan.ended_rows`): every chain of ops the rules accept computes on the NumPy backend, from
rows padded with zeros past ``T[i]``, each op's output masked there and a mean over them divided by the
count before the end (as the JAX device loop runs it), the same rows before the end as from the ``T[i]``
rows alone; the rules refuse a max, a point index, sizes that mention ``T`` otherwise and values of
``T`` but a scalar one (computed at ``T[i]``). Masking only the outputs :func:`masked_steps` picks (an
op that keeps zeros from zeros goes unmasked) gives those rows too, and zeros past the end of the
output."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tempo.ir import ops
from tempo.plan.ended_rows import island_axes, masked_steps, mean_counts, padded_axes
from tempo.runtime.backends.numpy import NumPyBackend
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import make_slice, step_and_bound, symbol

t, T = step_and_bound("t")
B = symbol("B", "bound", "b")
CAP = 7

OPS = {  # name -> (op for an input of rank r, its output's shape from the input's)
    "exp": (lambda r: ops.ElementwiseOp("exp"), lambda s: s),
    "neg": (lambda r: ops.ElementwiseOp("neg"), lambda s: s),
    "tanh": (lambda r: ops.ElementwiseOp("tanh"), lambda s: s),
    "double": (lambda r: ops.ElementwiseOp("add"), lambda s: s),  # x + x: both inputs padded
    "unsqueeze": (lambda r: ops.UnsqueezeOp(r), lambda s: s + (1,)),
    "permute": (lambda r: ops.PermuteOp((1, 0)) if r == 2 else None, lambda s: (s[1], s[0])),
    "sum0": (lambda r: ops.ReduceOp("sum", (0,)), lambda s: s[1:]),
    "sum_last": (lambda r: ops.ReduceOp("sum", (r - 1,), ordered=True), lambda s: s[:-1]),
    "mean0": (lambda r: ops.ReduceOp("mean", (0,)), lambda s: s[1:]),
    "max0": (lambda r: ops.ReduceOp("max", (0,)), lambda s: s[1:]),
    "cumsum0": (lambda r: ops.CumSumOp(0), lambda s: s),
    "reverse_scan0": (lambda r: ops.ScanOp(0, 0.9, reverse=True), lambda s: s),
    "discounted0": (lambda r: ops.DiscountedSumOp(0.9, 0), lambda s: s[1:]),
    "shift0": (lambda r: ops.SpatialIndexOp((make_slice(0, T - 1),)), lambda s: (T - 1,) + s[1:]),
    "row0": (lambda r: ops.SpatialIndexOp((make_slice(0, 1),)), lambda s: (1,) + s[1:]),
}


def chain(names: list[str]):
    """A fused island applying ``names`` in turn to a ``(T, 3)`` input (skipping those its rank lacks)."""
    steps, shape, src = [], (T, 3), (-1, 0)
    for name in names:
        make, shaped = OPS[name]
        op = make(len(shape)) if shape else None
        if op is None:
            continue
        shape = shaped(shape)
        steps.append(ops.FusedStep(op, (src, src) if name == "double" else (src,), ("float32",), shapes=(shape,)))
        src = (len(steps) - 1, 0)
    return ops.FusedOp(tuple(steps), ((len(steps) - 1, 0),)) if steps else None


def run(op: ops.FusedOp, x: np.ndarray, rows: int, masks=None) -> np.ndarray:
    """The island on NumPy with ``T = rows``; with ``masks`` (the padded axes of each op's output) each op's
    output zero past ``length + c`` along each padded ``(axis, c)``, ``length`` the rows before the end,
    and each mean over padded rows their sum divided by the count at ``T = length`` (:func:`mean_counts`),
    as the JAX device loop runs them."""
    backend, values = NumPyBackend(), []
    counts = {} if masks is None else mean_counts(op, [(T, 3)], [((0, 0),)], masks.outs)
    for j, step in enumerate(op.steps):
        kernel = backend.kernel(replace(step.op, fn="sum") if j in counts else step.op)
        value = kernel([x if k < 0 else values[k] for k, _ in step.inputs], {"T": rows}, ())[0]
        if j in counts:
            value = np.asarray(value) / np.float32(compile_expr(counts[j])({"T": masks.length}))
        if masks is not None:
            value = _masked(np.asarray(value), masks[j], masks.length)
        values.append(value)
    return np.asarray(values[-1])


def _masked(value: np.ndarray, axes, length: int) -> np.ndarray:
    value = value.copy()
    for a, c in axes:
        index = [slice(None)] * value.ndim
        index[a] = slice(max(length + c, 0), None)
        value[tuple(index)] = 0
    return value


class Masks(list):
    """The padded axes to mask of each op's output, with ``length`` and ``outs`` (:func:`island_axes`'
    padded axes of every op's outputs)."""
    length = 0
    outs: list = []


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), st.integers(2, CAP),
       st.lists(st.floats(-2, 2, width=32), min_size=3 * CAP, max_size=3 * CAP))
def test_a_chain_the_rules_accept_keeps_its_rows_before_the_end(names, length, values):
    op = chain(names)
    if op is None:
        return
    out_shape = op.steps[-1].shapes[0]
    axes = island_axes(op, [(T, 3)], [out_shape], T)
    refused = {"max0"} & set(names[:1]) or "row0" in names[:1]
    if refused:
        assert axes is None  # the first op reads the padded axis 0 as the rules refuse
    if axes is None:
        return
    ins, outs = axes
    assert ins == [((0, 0),)]
    x = np.asarray(values, np.float32).reshape(CAP, 3)
    x[length:] = 0
    masks = Masks(axes[0] for axes in outs)
    masks.length, masks.outs = length, outs
    padded = run(op, x, CAP, masks)
    short = run(op, x[:length], length)
    inside = tuple(slice(0, length + dict(outs[-1][0]).get(a, 0) if a in dict(outs[-1][0]) else None)
                   for a in range(padded.ndim))
    np.testing.assert_allclose(padded[inside], short, rtol=1e-6, atol=1e-6)


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=4), st.integers(2, CAP),
       st.lists(st.floats(-2, 2, width=32), min_size=3 * CAP, max_size=3 * CAP))
def test_masking_the_steps_masked_steps_picks_keeps_the_rows_and_zeros_past_the_end(names, length, values):
    op = chain(names)
    axes = None if op is None else island_axes(op, [(T, 3)], [op.steps[-1].shapes[0]], T)
    if axes is None:
        return
    ins, outs = axes
    picked = masked_steps(op, ins, outs)
    x = np.asarray(values, np.float32).reshape(CAP, 3)
    x[length:] = 0
    masks = Masks(axes[0] if j in picked else () for j, axes in enumerate(outs))
    masks.length, masks.outs = length, outs
    padded = run(op, x, CAP, masks)
    short = run(op, x[:length], length)
    ends = dict(outs[-1][0])
    inside = tuple(slice(0, length + ends[a]) if a in ends else slice(None) for a in range(padded.ndim))
    np.testing.assert_allclose(padded[inside], short, rtol=1e-6, atol=1e-6)
    for a, c in ends.items():
        past = [slice(None)] * padded.ndim
        past[a] = slice(length + c, None)
        assert not padded[tuple(past)].any()  # what the statement outputs holds zeros past the end


def test_an_op_that_keeps_zeros_from_zeros_is_not_masked():
    def picked(names):
        op = chain(names)
        return masked_steps(op, *island_axes(op, [(T, 3)], [op.steps[-1].shapes[0]], T))

    assert picked(["neg", "double", "sum0"]) == {2}  # -x and x + x hold zeros where x does
    assert picked(["exp", "sum0"]) == {0, 1}  # exp(0) == 1 would be summed
    assert picked(["neg", "exp", "permute", "cumsum0"]) == {2, 3}  # the permutation of what exp gives


def test_sizes_that_mention_the_bound_otherwise_are_refused():
    assert padded_axes((B, T), T) == ((1, 0),)
    assert padded_axes((T - 1, 4), T) == ((0, -1),)
    assert padded_axes((B * T,), T) is None
    assert padded_axes((B, 3), T) == ()
    value = ops.FusedStep(ops.EvalSymbolOp(B * T), (), ("int64",), shapes=((),))
    assert island_axes(ops.FusedOp((value,), ((0, 0),)), [], [()], T) is not None  # computed at T[i]
    rows = ops.FusedStep(ops.EvalSymbolOp(T - 1 - t, vectorized=(t,)), (), ("int64",), shapes=((T,),))
    assert island_axes(ops.FusedOp((rows,), ((0, 0),)), [], [(T,)], T) is None  # one value per row, of T
    cat_first = ops.FusedOp((ops.FusedStep(ops.CatOp(0), ((-1, 0), (-1, 1)), ("float32",), shapes=((T + 1,),)),),
                            ((0, 0),))
    assert island_axes(cat_first, [(T,), (1,)], [(T + 1,)], T) is None  # the padded part first: rows move
    assert island_axes(cat_first, [(1,), (T,)], [(T + 1,)], T) is not None  # the padded part last
