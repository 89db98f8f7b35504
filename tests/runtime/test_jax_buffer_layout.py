"""A growing read of a value of several axes (attention's keys, (heads, head size) a position) becomes a
buffer that holds its rows before the value's last axis (:mod:`tempo.transforms.masked_reads`): each
head's rows one run of memory. On JAX the step's row is written in place along that axis
(``dynamic_update_slice``: tests/runtime/test_jax_row_write.py), and the native stacked products read each head's rows at the head size
apart, not a position's heads apart; the values are NumPy's without the pass."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.api.functional as F
from tempo.ir import ops
from tempo.runtime.backends import base
from tempo.transforms import masked_reads

HEADS, LAYERS = 3, 2
OFF = {"masked_reads": False}
jax_only = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")


def decoder(backend: str, passes: dict, width: int = 8):
    """Layer ``l`` at step ``t`` attends, head by head, over its keys ``k[l, 0:t+1]`` ((heads, width) a step)."""
    rng = np.random.default_rng(2)
    ws = (rng.normal(size=(LAYERS, width, width)) / np.sqrt(width)).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(ws, dims=(l,))
        x = tpo.placeholder((HEADS, width), "float32", dims=(t,))
        x[0] = tpo.from_numpy(rng.normal(size=(HEADS, width)).astype(np.float32))
        h = tpo.placeholder((HEADS, width), "float32", dims=(l, t))
        h[0, t] = x[t]
        keys = (h[l, t] @ w[l]).tanh()                                        # (heads, width)
        seen = F.permute(keys[l, 0:t + 1], 1, 0, 2)                            # (heads, rows, width)
        scores = F.matmul(seen, F.unsqueeze(h[l, t], -1)) * 0.5                # (heads, rows, 1)
        weights = F.exp(scores - F.max(scores, axis=1, keepdims=True))
        mixed = F.matmul(F.permute(weights, 0, 2, 1), seen)                    # (heads, 1, width)
        y = keys + F.squeeze(mixed / F.sum(weights, axis=1, keepdims=True), 1) * 0.5
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t] * 0.9
        return ctx.compile(fetch=[x], backend=backend, passes=passes)


def test_the_buffer_holds_its_rows_before_the_last_axis_and_computes_the_same():
    bounds = {"L": LAYERS, "T": 7}
    plain = decoder("numpy", OFF)
    masked = decoder("numpy", {"masked_reads": masked_reads.Config(enabled=True, rows={"t": 7})})
    merges = [node.shapes[0] for node in masked.sdg.nodes.values() if isinstance(node.op, ops.MergeOp)
              and node.shapes[0][:1] == (HEADS,) and len(node.shapes[0]) == 3]
    assert merges and all(shape == (HEADS, 7, 8) for shape in merges)
    np.testing.assert_allclose(masked.run(bounds)[0], plain.run(bounds)[0], rtol=1e-5, atol=1e-6)


@jax_only
def test_on_jax_the_native_products_read_each_heads_rows_together(monkeypatch):
    import jax

    from tempo.runtime.backends import jax_native

    if not jax_native.available():
        pytest.skip(jax_native.unavailable())
    width, steps = 64, 70                                    # rows x 64 >= 4096: the stacked kernels' sizes
    calls, ffi_call = [], jax.ffi.ffi_call

    def spied(name, *args, **kwargs):
        run = ffi_call(name, *args, **kwargs)
        return lambda *xs, **attrs: calls.append((name, attrs)) or run(*xs, **attrs)

    monkeypatch.setattr(jax.ffi, "ffi_call", spied)
    bounds = {"L": LAYERS, "T": steps}
    want = decoder("numpy", OFF, width).run(bounds)[0]
    got = decoder("jax", {"masked_reads": masked_reads.Config(enabled=True, rows={"t": steps}, mask_products=True)},
                  width).run(bounds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    apart = {name: attrs.get("lda", attrs.get("ldb")) for name, attrs in calls if name != jax_native.PANEL_PRODUCT}
    assert apart == {jax_native.FEW_COLUMNS: width, jax_native.FEW_ROWS: width}
