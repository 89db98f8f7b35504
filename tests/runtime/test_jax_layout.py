"""Lazy permutations in JAX islands (tempo/runtime/backends/jax_layout.py).

Each island permutes its inputs, as an RL learner permutes acting's
time-major rows batch-major, and then runs one kind of op on them; the JAX
island (which computes on the unpermuted buffers) must give what the NumPy
kernel of the same island gives (float32: rtol 1e-5, atol 1e-5), and the
traced computation must not transpose the large operands where the module
says it need not.
"""
from __future__ import annotations

import numpy as np
import pytest

from tempo.ir import ops
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

F = ("float32",)


def _island(steps, outputs=None):
    steps = tuple(ops.FusedStep(op, inputs, dtypes) for op, inputs, dtypes in steps)
    return ops.FusedOp(steps, outputs or ((len(steps) - 1, 0),))


def _both(island, inputs):
    from tempo.runtime.backends import jax as jax_backend
    from tempo.runtime.backends import numpy as np_backend

    want = np_backend.KERNELS[ops.FusedOp](island)([np.asarray(x) for x in inputs], {}, ())
    kernel = jax_backend.Island(island.steps, island.outputs, {})
    with jax_backend.x64(True):
        got = kernel([np.asarray(x) for x in inputs], {}, ())
        text = next(iter(kernel.compiled.values())).lower([np.asarray(x) for x in inputs], kernel.consts,
                                                         {}).as_text()
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)
    return text


def _rows(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _transposes(text: str, shape: tuple) -> int:
    """How many transposes in the lowered program produce an array of ``shape``."""
    dims = "x".join(str(s) for s in shape)
    return sum(1 for line in text.splitlines() if "stablehlo.transpose" in line and f"tensor<{dims}xf32>" in
               line.split("->")[-1])


def test_a_learner_step_on_time_major_rows_keeps_their_layout():
    """(T, B, H) rows permuted to (B, T, H), through a bias, tanh, a product with a weight, a sum over
    the batch and the weight's gradient (a contraction over b and t): no (B, T, .) transpose is traced."""
    T, B, H, N = 7, 5, 4, 3
    x, w, bias = _rows(T, B, H), _rows(H, N, seed=1), _rows(N, seed=2)
    island = _island([
        (ops.PermuteOp((1, 0, 2)), ((-1, 0),), F),                  # 0: (B, T, H)
        (ops.MatMulOp(), ((0, 0), (-1, 1)), F),                     # 1: (B, T, N)
        (ops.ElementwiseOp("add"), ((1, 0), (-1, 2)), F),           # 2: + bias
        (ops.ElementwiseOp("tanh"), ((2, 0),), F),                  # 3
        (ops.PermuteOp((0, 2, 1)), ((0, 0),), F),                   # 4: (B, H, T)
        (ops.BatchContractOp(), ((4, 0), (3, 0)), F),               # 5: (H, N) = sum_b x^T y
        (ops.ReduceOp("sum", (0,)), ((3, 0),), F),                  # 6: (T, N)
        (ops.ReduceOp("mean", (1,), keepdims=True), ((3, 0),), F),  # 7: (B, 1, N)
    ], outputs=((5, 0), (6, 0), (7, 0), (3, 0)))
    text = _both(island, [x, w, bias])
    assert _transposes(text, (B, T, H)) == 0 and _transposes(text, (B, H, T)) == 0


@pytest.mark.parametrize("axes", [(1, 0, 2), (2, 0, 1), (0, 2, 1), (2, 1, 0)])
def test_elementwise_reductions_and_squeezes_under_any_permutation(axes):
    x, y = _rows(3, 4, 5), _rows(3, 4, 5, seed=1)
    shape = tuple((3, 4, 5)[a] for a in axes)
    island = _island([
        (ops.PermuteOp(axes), ((-1, 0),), F),                       # 0
        (ops.PermuteOp(axes), ((-1, 1),), F),                       # 1
        (ops.ElementwiseOp("mul"), ((0, 0), (1, 0)), F),            # 2: both in one layout
        (ops.ElementwiseOp("add"), ((2, 0), (-1, 2)), F),           # 3: + a row (rank 1)
        (ops.ElementwiseOp("sub"), ((3, 0), (-1, 3)), F),           # 4: - an unpermuted array
        (ops.ReduceOp("max", (-1,)), ((4, 0),), F),                 # 5
        (ops.UnsqueezeOp(1), ((5, 0),), F),                         # 6
        (ops.SqueezeOp(1), ((6, 0),), F),                           # 7
        (ops.CastOp("float64"), ((4, 0),), ("float64",)),           # 8
        (ops.CumSumOp(0), ((4, 0),), F),                            # 9
    ], outputs=((7, 0), (8, 0), (9, 0), (4, 0)))
    _both(island, [x, y, _rows(shape[-1], seed=2), _rows(*shape, seed=3)])


def test_a_reverse_linear_scan_along_time_of_time_major_rows():
    """GAE's recurrence over t of (B, T) values read from (T, B) rows."""
    x, a = _rows(6, 4), np.abs(_rows(6, 4, seed=1)) * 0.5
    island = _island([
        (ops.PermuteOp((1, 0)), ((-1, 0),), F),
        (ops.PermuteOp((1, 0)), ((-1, 1),), F),
        (ops.LinearScanOp(axis=1, reverse=True), ((0, 0), (1, 0)), F),
    ])
    _both(island, [x, a])


def test_products_whose_layouts_differ_are_computed_as_written():
    """A batched product of operands in two layouts, and a contraction whose summed axes come in
    another order in each operand: the operands are materialised, the values unchanged."""
    a, c, d = _rows(4, 3, 2, 5), _rows(3, 4, 5, 2, seed=1), _rows(3, 4, 2, 5, seed=2)
    island = _island([
        (ops.PermuteOp((1, 0, 2, 3)), ((-1, 0),), F),               # (3, 4, 2, 5)
        (ops.MatMulOp(), ((0, 0), (-1, 1)), F),                     # (3, 4, 2, 2)
    ])
    _both(island, [a, c])
    island = _island([
        (ops.PermuteOp((1, 0, 3, 2)), ((-1, 0),), F),               # (3, 4, 5, 2): m = 5, k = 2
        (ops.BatchContractOp(), ((0, 0), (-1, 1)), F),              # with (3, 4, 2, 5): (5, 5)
    ])
    _both(island, [a, d])


@pytest.mark.parametrize("columns", [(4, 1), (1, 3)])
def test_a_contraction_with_a_one_column_side_transposes_no_rows(columns):
    """A critic's last weight gradient, ``sum_{t,b} h^T g`` with ``g`` of one column (and the mirror
    case): a vector product in the form XLA runs as it is, with no transposed copy of the (T * B)
    rows traced, through the layout rule (time-major rows) and through the op itself."""
    T, B = 7, 5
    m, n = columns
    h, g = _rows(T, B, m), _rows(T, B, n, seed=1)
    island = _island([
        (ops.PermuteOp((1, 2, 0)), ((-1, 0),), F),                  # 0: (B, m, T)
        (ops.PermuteOp((1, 0, 2)), ((-1, 1),), F),                  # 1: (B, T, n)
        (ops.BatchContractOp(), ((0, 0), (1, 0)), F),               # 2: (m, n)
    ])
    text = _both(island, [h, g])
    assert _transposes(text, (m, T * B)) == 0 and _transposes(text, (n, T * B)) == 0
    plain = _island([(ops.BatchContractOp(), ((-1, 0), (-1, 1)), F)])
    text = _both(plain, [np.swapaxes(h, 1, 2), g])
    assert _transposes(text, (m, T * B)) == 0 and _transposes(text, (n, T * B)) == 0


@pytest.mark.parametrize("fill", [0.0, -2.0])
def test_a_buffer_masked_along_its_rows_feeds_a_product_a_sum_and_an_output(fill):
    """``where(rows <= t, permute(buffer), fill)`` (a K/V buffer of (S, B, H, D) masked to the rows
    written so far) read by ``keys @ q^T`` (the native kernel skips the masked rows where it is
    built), by a max over the rows and as an island output: NumPy's values, masked rows included."""
    from tempo.runtime.backends import jax_native

    S, B, H, D, G = 80, 1, 3, 64, 2
    buffer, q = _rows(S, B, H, D), _rows(B, H, D, G, seed=1)
    buffer[50:] = np.nan                                           # rows past t: never read by the product
    island = _island([
        (ops.ConstOp(ops.Array(np.arange(S).reshape(S, 1))), (), ("int64",)),   # 0: the rows' numbers
        (ops.ElementwiseOp("le"), ((0, 0), (-1, 2)), ("bool",)),    # 1: rows <= t
        (ops.PermuteOp((1, 2, 0, 3)), ((-1, 0),), F),               # 2: (B, H, S, D)
        (ops.ElementwiseOp("where"), ((1, 0), (2, 0), (-1, 3)), F),  # 3: masked
        (ops.MatMulOp(), ((3, 0), (-1, 1)), F),                     # 4: (B, H, S, G)
        (ops.ReduceOp("max", (2,)), ((3, 0),), F),                  # 5: (B, H, D)
    ], outputs=((4, 0), (5, 0), (3, 0)))
    text = _both(island, [buffer, q, np.asarray(49, np.int64), np.asarray(fill, np.float32)])
    assert ("tempo_stacked_few_columns" in text) == jax_native.available()
