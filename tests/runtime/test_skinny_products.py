"""The native float32 products with a few rows or columns on one side
(``tempo.runtime.backends.skinny_products``) against NumPy's, and the NumPy backend using them."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import numpy as numpy_backend
from tempo.runtime.backends import skinny_products as sp


@pytest.fixture
def lib():
    if sp.library() is None:
        pytest.skip(sp.unavailable())
    return sp.library()


def panels(count, k, width, seed=0):
    return np.random.default_rng(seed).standard_normal((count, k, width)).astype(np.float32)


def rows(lead, m, k, seed=1):
    return np.random.default_rng(seed).standard_normal((*lead, 1, m, k)).astype(np.float32)


def close(out, a, b):
    """Within float32 rounding of a sum of ``k`` products (the kernel sums in another order than BLAS)."""
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * np.sqrt(b.shape[-2]) * np.abs(expected).max())


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 12, 32])
@pytest.mark.parametrize("width", [16, 32, 48, 64])
def test_the_panel_kernel_is_the_product(lib, m, width):
    a, b = rows((), m, 37), panels(5, 37, width)
    close(sp.panels(a, b), a, b)


@pytest.mark.parametrize("lead", [(1,), (1, 1)])
def test_leading_axes_of_one_stay(lib, lead):
    a, b = rows(lead, 3, 64), panels(2, 64, 32)
    close(sp.panels(a, b), a, b)


def test_strided_rows_are_read_as_numbers(lib):
    """The rows as a decoding step holds them: a slice of a wider array (not C-ordered)."""
    wide = np.random.default_rng(2).standard_normal((1, 1, 12, 128)).astype(np.float32)
    a, b = wide[..., :64], panels(2, 64, 32)
    close(sp.panels(a, b), a, b)


@pytest.mark.parametrize("case", ["float64", "width 8", "width 128", "33 rows", "strided panels", "two matrices"])
def test_what_the_kernel_does_not_take_is_left_to_numpy(lib, case):
    a, b = rows((), 2, 32), panels(4, 32, 32)
    a, b = {"float64": (a.astype(np.float64), b.astype(np.float64)), "width 8": (a, panels(4, 32, 8)),
            "width 128": (a, panels(4, 32, 128)), "33 rows": (rows((), 33, 32), b),
            "strided panels": (a, panels(4, 32, 64)[..., :32]), "two matrices": (rows((2,), 2, 32), b)}[case]
    assert sp.panels(a, b) is None
    np.testing.assert_array_equal(numpy_backend._matmul(a, b), np.matmul(a, b))


def test_the_numpy_backend_multiplies_panels_with_the_kernel(lib, monkeypatch):
    calls = []
    real = sp.panels
    monkeypatch.setattr(sp, "panels", lambda a, b: calls.append(b.shape) or real(a, b))
    a, b = rows((), 1, 576), panels(18, 576, 32)
    close(numpy_backend._matmul(a, b), a, b)
    assert calls == [(18, 576, 32)]


def test_without_a_compiler_panels_are_numpy_products(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(sp.KERNELS, "loaded", {})
    a, b = rows((), 1, 64), panels(3, 64, 32)
    assert sp.panels(a, b) is None and sp.stacked(a, b) is None and "run with NumPy" in sp.unavailable()
    np.testing.assert_array_equal(numpy_backend._matmul(a, b), np.matmul(a, b))


@pytest.mark.parametrize("m", [1, 3, 4, 32])
@pytest.mark.parametrize("width", [32, 64])
def test_rows_by_panels_is_the_product_laid_out_row_by_row(lib, m, width):
    """A linear layer through panels: (m, k) @ (count, k, width) written as (m, count * width)."""
    x, b = rows((), m, 48)[0], panels(5, 48, width)
    out = sp.RowsByPanels((m, 5 * width))(x, b)
    close(out, x, b.transpose(1, 0, 2).reshape(48, 5 * width))


def test_rows_by_panels_keeps_the_panels_it_was_called_with(lib):
    """The panels' address is taken once; other panels (another constant) are multiplied as themselves."""
    x, first, second = rows((), 2, 32)[0], panels(3, 32, 32, seed=5), panels(3, 32, 32, seed=6)
    product = sp.RowsByPanels((2, 96))
    for b in (first, second, first):
        close(product(x, b), x, b.transpose(1, 0, 2).reshape(32, 96))


@pytest.mark.parametrize("case", ["float64", "another shape", "33 rows", "strided panels", "3-D rows"])
def test_what_rows_by_panels_does_not_take_is_none(lib, case):
    x, b = rows((), 2, 32)[0], panels(4, 32, 32)
    x, b, shape = {"float64": (x.astype(np.float64), b, (2, 128)), "another shape": (x, b, (1, 256)),
                   "33 rows": (rows((), 33, 32)[0], b, (33, 128)),
                   "strided panels": (x, panels(4, 32, 64)[..., :32], (2, 128)),
                   "3-D rows": (x[None], b, (2, 128))}[case]
    assert sp.RowsByPanels(shape)(x, b) is None


def test_a_decoding_product_of_packed_weights_matches_the_plain_one(lib, monkeypatch):
    """``x[t] @ w[l]`` of one row by a layer's constant matrix, packed into panels by the compiler on
    NumPy and multiplied by the kernel (the island's linear layer, written in its final layout),
    against the same program with the packing pass off."""
    calls = []
    real = sp.RowsByPanels.__call__
    monkeypatch.setattr(sp.RowsByPanels, "__call__",
                        lambda self, a, b: calls.append(b.shape) or real(self, a, b))
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((3, 1, 256)).astype(np.float32), rng.standard_normal((2, 256, 512)).astype(np.float32)

    def run(passes):
        with tpo.Context() as ctx:
            (l, L), (t, T) = ctx.dims("l", "t")
            y = tpo.from_numpy(x, dims=(t,))[t] @ tpo.from_numpy(w, dims=(l,))[l]
            (out,) = ctx.compile([y], backend="numpy", passes={"vectorize": False, **passes}).run({L: 2, T: 3})
        return np.asarray(out)

    packed = run({})
    assert calls and all(shape == (16, 256, 32) for shape in calls), calls
    plain = run({"pack_weights": False})
    np.testing.assert_allclose(packed, plain, rtol=0, atol=1e-5 * np.sqrt(256) * np.abs(plain).max())


def stack(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [16, 48, 64])
def test_a_few_rows_by_each_matrix_of_a_stack(lib, m, n):
    """Attention's ``weights @ values``: (batch, kv heads, groups, S) @ (batch, kv heads, S, head_dim)."""
    a, b = stack((2, 3, m, 1100), 0), stack((2, 3, 1100, n), 1)
    close(sp.stacked(a, b), a, b)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [16, 32, 48, 64, 1024])
def test_many_rows_by_a_few_columns_of_a_stack(lib, n, k):
    """Attention's ``keys @ q^T``: (batch, kv heads, S, head_dim) @ (batch, kv heads, head_dim, groups)."""
    a, b = stack((1, 3, 1100 * 16 // k, k), 0), stack((1, 3, k, n), 1)
    close(sp.stacked(a, b), a, b)


def test_stacks_read_as_the_stores_hold_them(lib):
    """Keys and values as a decoding step reads them: rows of a buffer with room for more (strided
    heads), and the prompt's as a permuted view (batch, P, kv, hd) -> (batch, kv, P, hd)."""
    store = stack((1, 3, 300, 64), 2)[:, :, :259]
    prompt = stack((1, 259, 3, 64), 3).transpose(0, 2, 1, 3)
    groups = stack((1, 3, 3, 259), 4)
    queries_t = np.ascontiguousarray(stack((1, 3, 3, 64), 5).transpose(0, 1, 3, 2))
    for keys_or_values in (store, prompt):
        close(sp.stacked(keys_or_values, queries_t), keys_or_values, queries_t)
        close(sp.stacked(groups, keys_or_values), groups, keys_or_values)


@pytest.mark.parametrize("batch", [2, 4])
def test_stacks_of_several_sequences_read_as_the_stores_hold_them(lib, monkeypatch, batch):
    """A key store's rows hold every sequence's heads side by side (one kernel call for the stack); the
    prompts' permuted view holds each sequence's positions apart (a call per sequence)."""
    calls = []
    for name in ("few_rows", "few_columns"):
        real = getattr(lib, name)
        monkeypatch.setattr(lib, name, lambda *args, real=real: calls.append(args[9 if len(args) == 13 else 7])
                            or real(*args))
    store = stack((300, batch, 3, 64), 6)[:259].transpose(1, 2, 0, 3)
    prompt = stack((batch, 259, 3, 64), 7).transpose(0, 2, 1, 3)
    groups = stack((batch, 3, 3, 259), 8)
    queries_t = np.ascontiguousarray(stack((batch, 3, 3, 64), 9).transpose(0, 1, 3, 2))
    for keys_or_values, per_call in ((store, [3 * batch]), (prompt, [3] * batch)):
        calls.clear()
        close(sp.stacked(keys_or_values, queries_t), keys_or_values, queries_t)
        close(sp.stacked(groups, keys_or_values), groups, keys_or_values)
        assert calls == per_call * 2


@pytest.mark.parametrize("case", ["float64", "5 rows", "width 24", "k 40", "transposed columns", "leads differ",
                                  "small"])
def test_what_the_stacked_kernels_do_not_take_is_left_to_numpy(lib, case):
    a, b = {"float64": (stack((3, 2, 1024), 0).astype(np.float64), stack((3, 1024, 16), 1).astype(np.float64)),
            "5 rows": (stack((3, 5, 1024), 0), stack((3, 1024, 16), 1)),
            "width 24": (stack((3, 2, 1024), 0), stack((3, 1024, 24), 1)),
            "k 40": (stack((3, 500, 40), 0), stack((3, 40, 3), 1)),
            "transposed columns": (stack((3, 500, 32), 0), stack((3, 3, 32), 1).transpose(0, 2, 1)),
            "leads differ": (stack((3, 2, 1024), 0), stack((1, 1024, 16), 1)),
            "small": (stack((3, 2, 32), 0), stack((3, 32, 16), 1))}[case]
    assert sp.stacked(a, b) is None
    np.testing.assert_allclose(numpy_backend._matmul(a, b), np.matmul(a, b), rtol=1e-6, atol=1e-6)


def test_the_numpy_backend_multiplies_stacks_with_the_kernels(lib):
    a, b = stack((1, 3, 3, 300), 0), stack((1, 3, 300, 64), 1)
    close(numpy_backend._matmul(a, b), a, b)
    keys, q_t = stack((1, 3, 300, 64), 2), stack((1, 3, 64, 3), 3)
    close(numpy_backend._matmul(keys, q_t), keys, q_t)
