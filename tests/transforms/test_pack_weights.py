"""Weight prepacking: constant right operands of products of few rows stored as column panels,
checked against the products computed by a NumPy loop."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir import ops
from tempo.transforms import pack_weights
from tests.transforms.simplification import ops_of


def packed_constants(program) -> list:
    """The program's constants stored as panels (rank 3 per point: panels, k, width)."""
    return [n for n in ops_of(program, ops.ConstOp) if len(n.shapes[0]) == 3]


def run(rows: int, k: int, n: int, width: int, layers: int, steps: int = 3, other_reader: bool = False):
    """``y[l, t] = tanh(x[t] @ w[l])`` for x (steps, rows, k) and w (layers, k, n), packed at ``width``;
    the compiled program, what it computed, what a NumPy loop computes, and ``w``."""
    rng = np.random.default_rng(rows * 100 + k)
    x = rng.standard_normal((steps, rows, k)).astype(np.float32)
    w = rng.standard_normal((layers, k, n)).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        xs = tpo.from_numpy(x, dims=(t,))
        ws = tpo.from_numpy(w, dims=(l,))
        y = (xs[t] @ ws[l]).tanh()
        fetch = [y]
        if other_reader:
            fetch.append(ws[l].sum(axis=0))
        program = ctx.compile(fetch, passes={"vectorize": False, "pack_weights": pack_weights.Config(
            panel=lambda m: width)})
        got = program.run({L: layers, T: steps})
    want = np.stack([[np.tanh(x[s] @ w[j]) for s in range(steps)] for j in range(layers)])
    return program, got, want, w


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), k=st.sampled_from([3, 8]), panels=st.integers(1, 3), width=st.sampled_from([4, 8]),
       layers=st.integers(1, 2))
def test_packed_products_compute_the_products(rows, k, panels, width, layers):
    program, got, want, _ = run(rows, k, panels * width, width, layers)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    assert len(packed_constants(program)) == (1 if rows <= 32 and panels >= 2 else 0)


def test_the_panels_hold_the_columns_in_order():
    program, got, want, w = run(4, 5, 12, 4, 2)
    (const,) = packed_constants(program)
    panels = const.op.value.array                                   # (layers, 3 panels, k, 4 columns)
    assert panels.shape == (2, 3, 5, 4) and panels.flags.c_contiguous
    np.testing.assert_array_equal(np.concatenate(list(np.moveaxis(panels, 1, 0)), axis=-1), w)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_a_constant_with_another_reader_is_left_as_it_is():
    program, got, want, _ = run(4, 8, 16, 4, 2, other_reader=True)
    assert not packed_constants(program)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_numpy_and_jax_with_its_native_products_pack_by_default_and_torch_does_not():
    from tempo.runtime.backends import get_backend, jax_native

    assert get_backend("numpy").weight_panel(4) == 64 and get_backend("numpy").weight_panel(16) == 32
    assert get_backend("torch").weight_panel(4) is None
    assert get_backend("jax").weight_panel(4) == (64 if jax_native.available() else None)
    x = np.ones((2, 4, 8), np.float32)
    w = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 1000
    for backend, packs in (("numpy", True), ("jax", jax_native.available()), ("torch", False)):
        with tpo.Context() as ctx:
            (t, T), = ctx.dims("t")
            y = tpo.from_numpy(x, dims=(t,))[t] @ tpo.from_numpy(w)
            program = ctx.compile([y], backend=backend, passes={"vectorize": False})
            np.testing.assert_allclose(program.run({T: 2})[0], x @ w, rtol=1e-6)
        assert bool(packed_constants(program)) == packs


@pytest.mark.parametrize("cfg, message", [
    (pack_weights.Config(panel=lambda m: 0), "gave 0 for products of 4 rows"),
    (pack_weights.Config(panel=lambda m: 8.0), "gave 8.0"),
    (pack_weights.Config(panel=lambda m: 8, max_rows=0), "max_rows"),
])
def test_a_bad_panel_config_is_a_clear_error(cfg, message):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        y = tpo.from_numpy(np.ones((2, 4, 8), np.float32), dims=(t,))[t] @ tpo.from_numpy(np.ones((8, 32), np.float32))
        with pytest.raises(TempoError, match=message):
            ctx.compile([y], passes={"vectorize": False, "pack_weights": cfg})


def test_a_product_of_many_rows_reads_the_matrix_put_back_together():
    """A constant read by a product of 2 rows (a decoding step) and one of 64 (a prefill) is packed;
    the 2-row product multiplies the panels, the 64-row one the whole matrix (a BLAS product of the
    whole matrix is faster at that size): NumPy's own product, bit for bit."""
    rng = np.random.default_rng(0)
    few, many = (rng.standard_normal((m, 16)).astype(np.float32) for m in (2, 64))
    w = rng.standard_normal((2, 16, 24)).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), = ctx.dims("l")
        ws = tpo.from_numpy(w, dims=(l,))
        small, large = tpo.from_numpy(few) @ ws[l], tpo.from_numpy(many) @ ws[l]
        program = ctx.compile([small, large], passes={"vectorize": False, "fuse": False,
                                                      "pack_weights": pack_weights.Config(panel=lambda m: 8)})
        got_small, got_large = program.run({L: 2})
    assert len(packed_constants(program)) == 1
    products = {tuple(n.shapes[0]) for n in ops_of(program, ops.MatMulOp)}
    assert products == {(3, 2, 8), (64, 24)}                     # the panel product, the whole one
    np.testing.assert_array_equal(got_large, np.stack([many @ w[j] for j in range(2)]))
    np.testing.assert_allclose(got_small, np.stack([few @ w[j] for j in range(2)]), rtol=1e-5, atol=1e-5)


def put_back_program(backend: str, cfg: pack_weights.Config | None, rows: tuple = (2, 64)):
    """``x[t] @ W[l]`` for each count of ``rows``, ``W`` held as panels of 8 columns (read-only) and
    read put back together, ``reshape(permute(P, (1, 0, 2)))``: the compiled program, what it
    computed, what NumPy computes from the plain matrices, and the panels."""
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((2, m, 16)).astype(np.float32) for m in rows]
    w = rng.standard_normal((2, 16, 24)).astype(np.float32)
    panels = pack_weights.panels_of(w, 8)
    panels.flags.writeable = False
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        ws = tpo.from_numpy(panels, dims=(l,)).permute(1, 0, 2).reshape(16, 24)
        products = [tpo.from_numpy(x, dims=(t,))[t] @ ws[l] for x in inputs]
        passes = {"vectorize": False, "fuse": False}
        program = ctx.compile(products, backend=backend,
                              passes=passes if cfg is None else {**passes, "pack_weights": cfg})
        got = program.run({L: 2, T: 2})
    want = [np.stack([[x[s] @ w[j] for s in range(2)] for j in range(2)]) for x in inputs]
    return program, got, want, panels


def test_products_of_a_matrix_put_back_from_panels_multiply_the_panels():
    """Constant panels read as the matrix put back together (a model's weights held in this layout):
    the product of 2 rows multiplies the panels themselves, the one of 64 puts the matrix back at
    its own point (l, t); the views over (l,) alone are gone, and the program holds the panels'
    own array: NumPy's whole product bit for bit, the panel product to rounding."""
    program, (got_small, got_large), (want_small, want_large), panels = put_back_program(
        "numpy", pack_weights.Config(panel=lambda m: 8))
    (const,) = packed_constants(program)
    assert np.shares_memory(const.op.value.array, panels)
    products = {tuple(n.shapes[0]) for n in ops_of(program, ops.MatMulOp)}
    assert products == {(3, 2, 8), (64, 24)}
    views = [n for n in program.sdg.nodes.values() if isinstance(n.op, (ops.PermuteOp, ops.ReshapeOp))]
    assert views and all(len(n.domain) == 2 for n in views)
    np.testing.assert_array_equal(got_large, want_large)
    np.testing.assert_allclose(got_small, want_small, rtol=1e-5, atol=1e-5)


def test_products_of_many_rows_alone_put_the_matrix_back_at_their_own_point():
    """With panels on the backend, products of many rows only (a prompt's logits) put the matrix
    back at their own point (l, t), one at a time, not once per layer for every step to read."""
    program, (got,), (want,), _ = put_back_program("numpy", pack_weights.Config(panel=lambda m: 8), rows=(64,))
    views = [n for n in program.sdg.nodes.values() if isinstance(n.op, (ops.PermuteOp, ops.ReshapeOp))]
    assert len(views) == 2 and all(len(n.domain) == 2 for n in views)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_matrix_put_back_from_panels_is_the_matrix_where_nothing_packs(backend):
    """Without panels for the products (the pass off on NumPy, torch's default), the program
    multiplies by the matrix put back together: the same numbers."""
    cfg = pack_weights.Config() if backend == "numpy" else None
    program, (got_small, got_large), (want_small, want_large), _ = put_back_program(backend, cfg)
    assert not {tuple(n.shapes[0]) for n in ops_of(program, ops.MatMulOp)} & {(3, 2, 8)}
    np.testing.assert_allclose(got_small, want_small, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_large, want_large, rtol=1e-5, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(lead=st.lists(st.integers(1, 3), max_size=2), k=st.integers(1, 5), count=st.integers(1, 4),
       width=st.sampled_from([1, 2, 8]), transposed=st.booleans())
def test_panels_of_and_matrix_of_are_inverse(lead, k, count, width, transposed):
    """Panel ``j`` holds columns ``j * width`` on, C-ordered, whatever the matrices' strides."""
    n = count * width
    matrices = np.arange(np.prod(lead, dtype=int) * k * n, dtype=np.float32).reshape(*lead, n, k)
    matrices = np.swapaxes(matrices, -1, -2) if transposed else matrices.reshape(*lead, k, n)
    panels = pack_weights.panels_of(matrices, width)
    assert panels.shape == (*lead, count, k, width) and panels.flags.c_contiguous
    for j in range(count):
        np.testing.assert_array_equal(panels[..., j, :, :], matrices[..., j * width:(j + 1) * width])
    np.testing.assert_array_equal(pack_weights.matrix_of(panels), matrices)


def test_width_for_follows_the_pass():
    cfg = pack_weights.Config(panel=lambda m: 64 if m <= 4 else 32)
    assert pack_weights.width_for(cfg, 1, 256) == 64 and pack_weights.width_for(cfg, 8, 256) == 32
    assert pack_weights.width_for(cfg, 33, 256) is None                  # more rows than max_rows
    assert pack_weights.width_for(cfg, 1, 64) is None                    # less than two panels
    assert pack_weights.width_for(cfg, 8, 80) is None                    # not whole panels
    assert pack_weights.width_for(pack_weights.Config(), 1, 256) is None
