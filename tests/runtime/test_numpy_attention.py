"""The attention op (``tempo.api.functional.attention``): its fused NumPy kernel (BLAS products around the
native softmax of ``numpy_attention.c``) against the reference in NumPy ops, and every backend
against that reference."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.api.functional as F
from tempo.errors import ShapeError
from tempo.ir import ops
from tempo.runtime.backends.base import available_backends
from tempo.runtime.backends import numpy_attention as na

# (queries' lead, keys' lead, R, S, rows, cols, window)
CASES = [((1, 3, 3), (1, 3, 1), 256, 1024, 768, 0, 0),      # grouped-query, the prompt's last block
         ((1, 3, 3), (1, 3, 1), 37, 300, 263, 0, 0),        # sizes that are no multiple of 16
         ((2, 4), (2, 4), 16, 64, 48, 0, 0),                # batch 2, as many key heads as query heads
         ((2, 1, 2), (1, 1), 20, 40, 30, 10, 7),            # a window, keys from position 10
         ((), (), 5, 5, 0, 0, 0),                           # one matrix: the whole prompt, causal
         ((3,), (3,), 1, 1, 0, 0, 0)]


def inputs(q_lead, kv_lead, R, S, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*q_lead, R, 16)).astype(np.float32),
            rng.standard_normal((*kv_lead, S, 16)).astype(np.float32),
            rng.standard_normal((*kv_lead, S, 8)).astype(np.float32))


def close(out, expected, values, scale=1.0):
    """Within 1e-6 of the values' largest magnitude (the output is a weighted mean of them), times
    the op's scale where it is above 1: a score's float32 rounding, which depends on the order of
    its sums (BLAS's differs between CPUs), is multiplied by the scale before the exponential."""
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * max(1.0, scale) * np.abs(values).max())


def test_the_reference_is_softmax_over_the_keys_each_query_sees():
    q, k, v = inputs((2,), (2,), 6, 9)
    op = ops.AttentionOp(0.25, rows=5, cols=2, window=4)
    expected = np.empty((2, 6, 8), np.float32)
    for b in range(2):
        for i in range(6):
            keys = [j for j in range(9) if 5 + i - 4 < 2 + j <= 5 + i]
            s = 0.25 * (k[b, keys] @ q[b, i]).astype(np.float64)
            w = np.exp(s - s.max())
            expected[b, i] = (w / w.sum()) @ v[b, keys]
    close(na.reference(op, q, k, v), expected, v)


@pytest.fixture
def lib():
    if na.library() is None:
        pytest.skip(na.unavailable())
    return na.library()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"R{c[2]}-S{c[3]}-w{c[6]}")
@pytest.mark.parametrize("piece", [1 << 18, 64])
def test_the_fused_kernel_is_the_reference(lib, monkeypatch, case, piece):
    """Pieces of 1 MB of scores, and of 16 rows (many pieces a block, each over its own keys)."""
    q_lead, kv_lead, R, S, rows, cols, window = case
    monkeypatch.setattr(na, "PIECE_FLOATS", piece)
    q, k, v = inputs(q_lead, kv_lead, R, S)
    op = ops.AttentionOp(0.25, rows, cols, window)
    close(na.fused(op, q, k, v, lib), na.reference(op, q, k, v), v)


def test_the_fused_kernel_reads_strided_keys(lib):
    """Keys and values as the prompt holds them: a permuted view, (batch, kv, 1, P, hd) of (batch, P, kv, hd)."""
    rng = np.random.default_rng(3)
    k, v = (rng.standard_normal((1, 70, 3, 16)).astype(np.float32).transpose(0, 2, 1, 3)[:, :, None] for _ in "kv")
    q = rng.standard_normal((1, 3, 2, 30, 16)).astype(np.float32)
    op = ops.AttentionOp(0.25, rows=40, cols=0)
    close(na.fused(op, q, k, v, lib), na.reference(op, q, k, v), v)


def test_large_scores_do_not_overflow(lib):
    q, k, v = inputs((2,), (2,), 8, 40)
    op = ops.AttentionOp(50.0, rows=32)
    out = na.fused(op, q, k, v, lib)
    assert np.isfinite(out).all()
    close(out, na.reference(op, q, k, v), v, op.scale)


def test_without_a_compiler_the_kernel_is_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(na.KERNELS, "loaded", {})
    assert na.library() is None and "runs with NumPy ops" in na.unavailable()
    q, k, v = inputs((1, 3, 3), (1, 3, 1), 12, 20)
    op = ops.AttentionOp(0.25, rows=8)
    np.testing.assert_array_equal(na.kernel(op)([q, k, v], {}, ()), (na.reference(op, q, k, v),))


@pytest.mark.parametrize("backend", available_backends())
def test_every_backend_computes_the_reference(backend):
    q, k, v = inputs((1, 3, 3), (1, 3, 1), 24, 40)
    with tpo.Context() as ctx:
        out = F.attention(tpo.from_numpy(q), tpo.from_numpy(k), tpo.from_numpy(v), 0.25, rows=16, window=30)
        (got,) = ctx.run(bounds={}, fetch=[out], backend=backend)
    close(np.asarray(got), na.reference(ops.AttentionOp(0.25, 16, 0, 30), q, k, v), v)


@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("window", [0, 6])
def test_queries_at_the_keys_last_positions(backend, window):
    """With ``last``, chunk ``c`` of 4 queries over the keys of chunks 0 to ``c`` (a read that grows
    with the dim): at each chunk the reference with the queries at positions ``4c`` on."""
    q, k, v = inputs((3,), (3,), 4, 4)
    with tpo.Context() as ctx:
        (c, C), = ctx.dims("c")

        def upto(x):
            rows = tpo.from_numpy(x, dims=(c,))[0:c + 1]
            return F.reshape(rows, rows.shape[0] * 4, x.shape[-1])

        out = F.attention(tpo.from_numpy(q, dims=(c,)), upto(k), upto(v), 0.25, window=window, last=True)
        (got,) = ctx.run(bounds={C: 3}, fetch=[out], backend=backend)
    for chunk in range(3):
        op = ops.AttentionOp(0.25, rows=4 * chunk, window=window)
        keys, values = (x[:chunk + 1].reshape(-1, x.shape[-1]) for x in (k, v))
        close(np.asarray(got)[chunk], na.reference(op, q[chunk], keys, values), v)


def test_attention_over_a_vectorized_dim():
    """Queries that vary with a dim the program batches: one op with one more leading axis."""
    q, k, v = inputs((4, 2), (2,), 6, 10)
    with tpo.Context() as ctx:
        (b, B), = ctx.dims("b")
        out = F.attention(tpo.from_numpy(q, dims=(b,)), tpo.from_numpy(k), tpo.from_numpy(v), 0.5, rows=4)
        (got,) = ctx.run(bounds={B: 4}, fetch=[out])
    close(got, na.reference(ops.AttentionOp(0.5, 4), q, k[None], v[None]), v)


def test_mismatched_sizes_are_a_shape_error():
    q, k, v = inputs((2,), (2,), 6, 10)
    with tpo.Context():
        with pytest.raises(ShapeError, match="attention needs queries"):
            F.attention(tpo.from_numpy(q), tpo.from_numpy(k), tpo.from_numpy(v[:, :9]), 0.5)


def step_parts(batch, heads, groups, depth, length, prompt, seed=5):
    """A decoding step's queries (batch, kv, groups, hd) and parts: its keys and values as their
    block store holds them (rows with room for more) and the prompt's given scores with its values
    as a permuted view (batch, P, kv, hd) -> (batch, kv, P, hd)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    q = normal(batch, heads, groups, depth)
    keys, values = (normal(batch, heads, length + 9, depth)[:, :, :length] for _ in "kv")
    parts = [(None, keys, values)]
    if prompt:
        parts.append((normal(batch, heads, groups, prompt), None, normal(batch, prompt, heads, depth).transpose(0, 2, 1, 3)))
    return q, parts


def step_reference(q, parts, scale):
    scores, values = [], []
    for given, keys, vals in parts:
        scores.append(given if keys is None else scale * q.astype(np.float64) @ np.swapaxes(keys, -1, -2))
        values.append(np.broadcast_to(vals, q.shape[:2] + vals.shape[2:]))
    s = np.concatenate([np.broadcast_to(x, q.shape[:3] + x.shape[-1:]) for x in scores], -1)
    weights = np.exp(s - s.max(-1, keepdims=True))
    return (weights @ np.concatenate(values, -2).astype(np.float64)) / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("case", [(4, 3, 3, 64, 1024, 1), (1, 3, 3, 64, 257, 0), (2, 2, 4, 32, 15, 7),
                                  (3, 1, 1, 16, 33, 17), (4, 3, 2, 48, 100, 2)])
def test_a_decoding_step_is_softmax_over_every_part(lib, case):
    batch, heads, groups, depth, length, prompt = case
    q, parts = step_parts(*case)
    out = na.step(q, parts, 0.125)
    assert out.shape == q.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, step_reference(q, parts, 0.125), rtol=0, atol=2e-6 * np.abs(parts[0][2]).max())


def test_a_step_broadcasts_leading_axes_of_one_and_reads_strided_queries(lib):
    """Keys shared by every sequence (a leading 1), queries a transposed view (rows not contiguous)."""
    q, parts = step_parts(3, 2, 3, 32, 40, 2)
    shared = (parts[1][0], None, parts[1][2][:1])
    keys = (None, parts[0][1][:1], parts[0][2][:1])
    strided = np.ascontiguousarray(q.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    out = na.step(strided, [keys, shared], 0.5)
    np.testing.assert_allclose(out, step_reference(q, [keys, shared], 0.5), rtol=0, atol=2e-6 * 4)


def test_large_step_scores_do_not_overflow(lib):
    q, parts = step_parts(2, 3, 3, 64, 50, 3)
    out = na.step(q * 40, parts, 1.0)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, step_reference(q * 40, parts, 1.0), rtol=0, atol=1e-5 * 4)


@pytest.mark.parametrize("case", ["float64", "5 groups", "head of 24", "head of 128", "empty part", "5 parts",
                                  "values of another size", "columns apart", "lengths differ"])
def test_what_the_step_kernel_does_not_take_is_none(lib, case):
    q, parts = step_parts(2, 3, 3, 64, 40, 2)
    keys, given = parts
    q, parts = {"float64": (q.astype(np.float64), parts), "5 groups": (np.concatenate([q, q[:, :, :2]], 2), parts),
                "head of 24": (q[..., :24], [(None, keys[1][..., :24], keys[2][..., :24])]),
                "head of 128": (np.concatenate([q, q], -1), [(None, *(np.concatenate([x, x], -1) for x in keys[1:]))]),
                "empty part": (q, [keys, (None, keys[1][:, :, :0], keys[2][:, :, :0])]),
                "5 parts": (q, [keys] * 5),
                "values of another size": (q, [(None, keys[1], keys[2][..., :32])]),
                "columns apart": (q, [(None, keys[1][..., ::2], keys[2][..., ::2])]),
                "lengths differ": (q, [(None, keys[1], keys[2][:, :, :30])])}[case]
    assert na.step(q, parts, 0.125) is None


def test_without_a_compiler_the_step_kernel_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(na.KERNELS, "loaded", {})
    q, parts = step_parts(2, 3, 3, 64, 40, 2)
    assert na.step(q, parts, 0.125) is None
