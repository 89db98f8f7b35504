"""A decoding step's attention in a JAX island as one native call (:mod:`tempo.runtime.backends.jax_attention`):
the chain the masked-reads pass and ``tempo.llm`` write (a K/V buffer's part masked to the rows written, a
prompt's part, a window's masked prompt) gives the softmax over the rows kept, read only at those rows;
where the call does not apply, or its run-time check fails, the chain's own steps run."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.ir import ops
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

ROWS, PROMPT, SCALE = 40, 6, 0.125
F32 = ("float32",)
# the island's inputs, in order
NAMES = ("qt", "keys", "values", "numbers", "t", "scale", "zero", "no_row", "weights_fill", "prompt_keys",
         "prompt_values", "prompt_from", "prompt_numbers")


def attention_island(window: bool, masked: bool = True) -> ops.FusedOp:
    """The island of a decoding step's attention as the masked-reads pass and ``tempo.llm.program.attend``
    write it: the buffer's keys masked before the scores' product and its scores before their largest,
    its weights masked before their sum and their product, its values before theirs; the prompt's
    scores (with ``window``: masked to the rows from ``prompt_from`` on, with -inf) unmasked otherwise;
    the buffer's masked weights filled with the input ``weights_fill``. Without ``masked``, no masks:
    every row of the buffer counts."""
    steps: list[ops.FusedStep] = []
    at = {name: (-1, k) for k, name in enumerate(NAMES)}

    def add(op, *inputs, dtypes=F32):
        steps.append(ops.FusedStep(op, tuple(at.get(i, i) for i in inputs), dtypes))
        return (len(steps) - 1, 0)

    def where(cond, x, fill):
        return add(ops.ElementwiseOp("where"), cond, x, fill) if masked else x

    def scores_of(keys):
        product = add(ops.MatMulOp(), keys, "qt")
        return add(ops.ElementwiseOp("mul"), add(ops.PermuteOp((0, 1, 3, 2)), product), "scale")

    def largest(x):
        return add(ops.ReduceOp("max", (-1,), keepdims=True), x)

    def weights_of(scores, top):
        return add(ops.ElementwiseOp("exp"), add(ops.ElementwiseOp("sub"), scores, top))

    written = add(ops.ElementwiseOp("le"), "numbers", "t", dtypes=("bool",))
    column = add(ops.ReshapeOp((ROWS, 1)), written, dtypes=("bool",))
    row = add(ops.ReshapeOp((ROWS,)), written, dtypes=("bool",))
    scores = scores_of(where(column, "keys", "zero"))
    prompt = scores_of("prompt_keys")
    if window and masked:
        seen = add(ops.ElementwiseOp("ge"), "prompt_numbers", "prompt_from", dtypes=("bool",))
        prompt = where(seen, prompt, "no_row")
    top = add(ops.ElementwiseOp("maximum"), largest(where(row, scores, "no_row")), largest(prompt))
    weights, prompt_weights = weights_of(scores, top), weights_of(prompt, top)
    total = add(ops.ElementwiseOp("add"), add(ops.ReduceOp("sum", (-1,), keepdims=True),
                                               where(row, weights, "weights_fill")),
                add(ops.ReduceOp("sum", (-1,), keepdims=True), prompt_weights))
    mixed = add(ops.ElementwiseOp("add"), add(ops.MatMulOp(), where(row, weights, "weights_fill"),
                                               where(column, "values", "zero")),
                add(ops.MatMulOp(), prompt_weights, "prompt_values"))
    out = add(ops.ElementwiseOp("div"), mixed, total)
    return ops.FusedOp(tuple(steps), (out,))


def inputs(batch: int, heads: int, groups: int, depth: int, t: int, prompt_from: int = 0, seed: int = 0) -> dict:
    """The island's inputs: the buffer's rows past ``t`` zeros, as the masked-reads pass leaves them."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.normal(size=shape).astype(np.float32)

    keys, values = normal(batch, heads, ROWS, depth), normal(batch, heads, ROWS, depth)
    keys[:, :, t + 1:] = values[:, :, t + 1:] = 0.0
    return {"qt": normal(batch, heads, depth, groups), "keys": keys, "values": values,
            "numbers": np.arange(ROWS), "t": np.asarray(t), "scale": np.float32(SCALE), "zero": np.float32(0.0),
            "no_row": np.float32(-np.inf), "weights_fill": np.float32(0.0),
            "prompt_keys": normal(batch, heads, PROMPT, depth),
            "prompt_values": normal(batch, heads, PROMPT, depth), "prompt_from": np.asarray(prompt_from),
            "prompt_numbers": np.arange(PROMPT)}


def softmax_over_rows_kept(x: dict) -> np.ndarray:
    """The attention over the buffer's rows up to ``t`` and the prompt's from ``prompt_from`` on, in float64."""
    t, start = int(x["t"]), int(x["prompt_from"])
    keys = np.concatenate([x["keys"][:, :, :t + 1], x["prompt_keys"][:, :, start:]], axis=2).astype(np.float64)
    values = np.concatenate([x["values"][:, :, :t + 1], x["prompt_values"][:, :, start:]], axis=2)
    scores = np.swapaxes(x["qt"], -1, -2).astype(np.float64) @ np.swapaxes(keys, -1, -2) * SCALE
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights @ values) / weights.sum(axis=-1, keepdims=True)


def run_on_jax(island: ops.FusedOp, x: dict, monkeypatch) -> tuple[np.ndarray, list[str]]:
    """The island's output on JAX, and the names of the native calls its program makes."""
    import jax

    from tempo.runtime.backends import jax as jax_backend

    names, ffi_call = [], jax.ffi.ffi_call

    def spied(name, *args, **kwargs):
        names.append(name)
        return ffi_call(name, *args, **kwargs)

    monkeypatch.setattr(jax.ffi, "ffi_call", spied)
    kernel = jax_backend.Island(island.steps, island.outputs, {})
    with jax_backend.x64(True):
        out = kernel([x[name] for name in NAMES], {}, ())
    return np.asarray(out[0]), names


def run_on_numpy(island: ops.FusedOp, x: dict) -> np.ndarray:
    from tempo.runtime.backends import numpy as np_backend

    return np_backend.KERNELS[ops.FusedOp](island)([x[name] for name in NAMES], {}, ())[0]


@pytest.fixture
def native():
    from tempo.runtime.backends import jax_native

    if not jax_native.available():
        pytest.skip(jax_native.unavailable())
    return jax_native


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("groups", [1, 2, 3, 4])
def test_causal_decoding_attention_is_one_native_call_over_the_rows_written(native, monkeypatch, batch, groups):
    x = inputs(batch, 2, groups, 64, t=17)
    got, names = run_on_jax(attention_island(window=False), x, monkeypatch)
    assert native.ATTEND in names
    np.testing.assert_allclose(got, softmax_over_rows_kept(x), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("batch, groups", [(1, 1), (3, 3), (1, 4), (3, 2)])
def test_window_decoding_attention_reads_the_buffer_and_the_prompts_rows_in_view(native, monkeypatch, batch, groups):
    """A window's buffer full (every row written), its prompt part masked to its last rows."""
    x = inputs(batch, 3, groups, 32, t=ROWS - 1, prompt_from=4)
    got, names = run_on_jax(attention_island(window=True), x, monkeypatch)
    assert native.ATTEND in names
    np.testing.assert_allclose(got, softmax_over_rows_kept(x), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got, run_on_numpy(attention_island(window=True), x), rtol=2e-5, atol=2e-6)


def test_without_masks_the_call_is_all_the_program_makes(native, monkeypatch):
    """Nothing to check at run time: the chain's steps (and their stacked products) are not traced."""
    x = inputs(3, 2, 3, 64, t=ROWS - 1)
    got, names = run_on_jax(attention_island(window=False, masked=False), x, monkeypatch)
    assert names == [native.ATTEND]
    np.testing.assert_allclose(got, softmax_over_rows_kept(x), rtol=2e-5, atol=2e-6)


def test_a_head_size_the_kernel_does_not_take_runs_the_steps(native, monkeypatch):
    x = inputs(3, 2, 2, 8, t=5)
    got, names = run_on_jax(attention_island(window=False), x, monkeypatch)
    assert native.ATTEND not in names
    np.testing.assert_allclose(got, softmax_over_rows_kept(x), rtol=2e-5, atol=2e-6)


def test_a_masked_weight_that_is_not_zero_runs_the_steps(native, monkeypatch):
    """A masked weight of 1 counts the row: the run-time check fails, the chain's steps give NumPy's
    values, not the softmax over the rows written."""
    x = dict(inputs(3, 2, 2, 64, t=12), weights_fill=np.float32(1.0))
    got, names = run_on_jax(attention_island(window=False), x, monkeypatch)
    assert native.ATTEND in names
    want = run_on_numpy(attention_island(window=False), x)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert not np.allclose(want, softmax_over_rows_kept(x), rtol=1e-3)


def test_a_mask_of_two_runs_of_rows_runs_the_steps(native, monkeypatch):
    """The call reads one run of rows a part: rows 0-4, 10-14, ... kept fail the run-time check."""
    x = inputs(3, 2, 2, 64, t=12)
    x["numbers"] = np.where(np.arange(ROWS) % 10 < 5, 0, ROWS)
    got, names = run_on_jax(attention_island(window=False), x, monkeypatch)
    assert native.ATTEND in names
    np.testing.assert_allclose(got, run_on_numpy(attention_island(window=False), x), rtol=2e-5, atol=2e-6)


def decoder(backend: str, batch: int, groups: int, window: int | None, depth: int = 32, heads: int = 2):
    """A two-layer decoder whose step ``t`` attends (``tempo.llm.program.attend``) over a prompt's keys and
    values and its layer's own, ``k[l, 0:t+1]`` or a window's ``k[l, max(0, t-w+1):t+1]``: on JAX the
    masked-reads pass's buffers (a window's circular), masked. (A window's mask of the prompt's rows is
    :func:`test_window_decoding_attention_reads_the_buffer_and_the_prompts_rows_in_view`'s.)"""
    import tempo as tpo
    import tempo.api.functional as F
    from tempo.llm.program import attend
    from tempo.llm.tiling import Prefix

    rng = np.random.default_rng(3)

    def normal(*shape, size=1.0):
        return (rng.normal(size=shape) * size).astype(np.float32)

    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(normal(2, depth, depth, size=depth ** -0.5), dims=(l,))
        x = tpo.placeholder((batch, heads, groups, depth), "float32", dims=(t,))
        x[0] = tpo.from_numpy(normal(batch, heads, groups, depth))
        h = tpo.placeholder((batch, heads, groups, depth), "float32", dims=(l, t))
        h[0, t] = x[t]
        q = h[l, t]
        k = F.tanh(F.matmul(F.sum(q, axis=2), w[l]))                                  # (batch, heads, depth)
        v = F.sin(k)
        read = (lambda r: r[l, 0:t + 1]) if window is None else (lambda r: r[l, tpo.max(0, t - window + 1):t + 1])
        prefix = Prefix(tpo.from_numpy(normal(batch, heads, PROMPT, depth)),
                        tpo.from_numpy(normal(batch, heads, PROMPT, depth)), SCALE)
        y = attend(q, prefix, read(k), read(v), SCALE) + q * 0.5
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t]
        return ctx.compile(fetch=[x], backend=backend)


@pytest.mark.parametrize("batch, groups, window", [(1, 3, None), (3, 2, 5)])
def test_a_decoders_attention_on_jax_is_the_call_with_numpys_values(native, monkeypatch, batch, groups, window):
    bounds = {"L": 2, "T": 12}
    want = decoder("numpy", batch, groups, window).run(bounds)[0]
    calls, attention_call = [], native.attention_call
    monkeypatch.setattr(native, "attention_call", lambda *args: calls.append(attention_call(*args)) or calls[-1])
    got = decoder("jax", batch, groups, window).run(bounds)[0]
    assert calls and all(call is not None for call in calls)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
