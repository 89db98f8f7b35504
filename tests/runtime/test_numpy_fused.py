"""tempo/runtime/backends/numpy_fused.py: a fused island as one generated function, against its steps run by hand."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tempo.ir import ops
from tempo.runtime.backends.base import StepFailed
from tempo.runtime.backends.numpy import NumPyBackend
from tempo.runtime.backends.numpy_fused import compile_island


def island(*steps, outputs):
    return ops.FusedOp(steps=tuple(steps), outputs=outputs)


def step(op, inputs, dtypes=("float32",), site=None):
    return ops.FusedStep(op=op, inputs=inputs, dtypes=dtypes, site=site)


def test_an_island_computes_what_its_steps_compute_one_by_one_with_each_steps_dtype():
    fused = island(step(ops.ElementwiseOp("mul"), ((-1, 0), (-1, 1))),  # x * y
                   step(ops.ReduceOp("sum", (1,)), ((0, 0),), ("float64",)),  # summed rows, cast up
                   step(ops.ElementwiseOp("exp"), ((0, 0),)),  # exp(x * y)
                   step(ops.ElementwiseOp("lt"), ((2, 0), (-1, 1)), ("bool",)),
                   outputs=((1, 0), (2, 0), (3, 0)))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    rows, e, below = NumPyBackend().kernel(fused)([x, y], {}, ())
    np.testing.assert_array_equal(rows, (x * y).sum(axis=1).astype(np.float64))
    np.testing.assert_array_equal(e, np.exp(x * y))
    np.testing.assert_array_equal(below, np.exp(x * y) < y)
    assert (rows.dtype, e.dtype, below.dtype) == (np.float64, np.float32, np.bool_)


def test_a_reduction_to_a_scalar_comes_back_as_an_array():
    fused = island(step(ops.ReduceOp("sum", (0,)), ((-1, 0),)), outputs=((0, 0),))
    out, = NumPyBackend().kernel(fused)([np.arange(4, dtype=np.float32)], {}, ())
    assert isinstance(out, np.ndarray) and out.shape == () and float(out) == 6.0


def test_an_intermediate_is_freed_after_its_last_reader():
    seen = []

    def record(inputs, env, point):  # the last step: is the first step's value still referenced?
        gc.collect()
        seen.append(first() is None)
        return (inputs[0] + 1,)

    def make_first(inputs, env, point):
        value = inputs[0] * 2
        nonlocal first
        first = weakref.ref(value)
        return (value,)

    first = None
    kernels = {"a": make_first, "b": lambda inputs, env, point: (inputs[0] + 1,), "c": record}
    fused = island(step(ops.ElementwiseOp("a"), ((-1, 0),)), step(ops.ElementwiseOp("b"), ((0, 0),)),
                   step(ops.ElementwiseOp("c"), ((1, 0),)), outputs=((2, 0),))
    out, = compile_island(fused, lambda op: kernels[op.fn])([np.ones(3, np.float32)], {}, ())
    np.testing.assert_array_equal(out, np.full(3, 4.0, np.float32))
    assert seen == [True]


def test_a_failing_step_is_named_with_its_site():
    fused = island(step(ops.ElementwiseOp("add"), ((-1, 0), (-1, 1))),
                   step(ops.MatMulOp(), ((0, 0), (-1, 1)), site="model.py:7"), outputs=((1, 0),))
    with pytest.raises(StepFailed) as failed:
        NumPyBackend().kernel(fused)([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)], {}, ())
    assert failed.value.op_name == ops.MatMulOp().name and failed.value.site == "model.py:7"


def test_direct_calls_give_what_the_kernels_give():
    fused = island(step(ops.UnsqueezeOp(0), ((-1, 0),)),                        # (1, 3, 4)
                   step(ops.MatMulOp(), ((0, 0), (-1, 1))),                       # (1, 3, 2)
                   step(ops.ReduceOp("sum", (-1,), keepdims=True), ((1, 0),)),
                   step(ops.ElementwiseOp("tanh"), ((2, 0),)),                    # not read: still computed
                   step(ops.ElementwiseOp("sub"), ((1, 0), (2, 0)), ("float64",)),
                   outputs=((4, 0),))
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    backend = NumPyBackend()
    by_kernels, = compile_island(fused, backend.kernel)([x, w], {}, ())
    direct, = backend.kernel(fused)([x, w], {}, ())
    assert direct.dtype == np.float64 and direct.shape == (1, 3, 2)
    np.testing.assert_array_equal(direct, by_kernels)
    np.testing.assert_array_equal(direct, (x @ w - (x @ w).sum(-1, keepdims=True))[None].astype(np.float64))
    with pytest.raises(StepFailed) as failed:
        backend.kernel(fused)([x, w[:3]], {}, ())
    assert failed.value.op_name == ops.MatMulOp().name


def test_a_step_whose_output_nobody_reads_still_runs_and_fails_by_its_name():
    fused = island(step(ops.ElementwiseOp("exp"), ((-1, 0),)),
                   step(ops.ElementwiseOp("add"), ((-1, 0), (-1, 1)), site="model.py:3"), outputs=((0, 0),))
    with pytest.raises(StepFailed) as failed:
        NumPyBackend().kernel(fused)([np.ones(3, np.float32), np.ones(2, np.float32)], {}, ())
    assert failed.value.op_name == ops.ElementwiseOp("add").name and failed.value.site == "model.py:3"


@pytest.mark.parametrize("x_shape, before, after", [((4, 6), 1, -2), ((4, 6), -2, 1), ((2, 3, 6), 2, -2),
                                                    ((6,), 0, -2), ((4, 6), 0, 0), ((4, 1), 1, 1)])
def test_a_layer_on_a_batch_of_vectors_gives_its_steps_numbers_bit_for_bit(x_shape, before, after):
    fused = island(step(ops.UnsqueezeOp(before), ((-1, 0),)), step(ops.MatMulOp(), ((0, 0), (-1, 1))),
                   step(ops.SqueezeOp(after), ((1, 0),)), step(ops.ElementwiseOp("tanh"), ((2, 0),)),
                   outputs=((3, 0),))
    rng = np.random.default_rng(1)
    x = rng.normal(size=x_shape).astype(np.float32)
    w = rng.normal(size=(x_shape[-1], 5)).astype(np.float32)
    backend = NumPyBackend()
    by_hand = x
    for op in (ops.UnsqueezeOp(before), None, ops.SqueezeOp(after), ops.ElementwiseOp("tanh")):
        by_hand = backend.kernel(ops.MatMulOp())([by_hand, w], {}, ())[0] if op is None else \
            backend.kernel(op)([by_hand], {}, ())[0]
    kernel = backend.kernel(fused)
    got, = kernel([x, w], {}, ())
    assert got.shape == by_hand.shape and got.tobytes() == by_hand.tobytes()
    assert not {"f0", "f1", "k0", "k1"} & set(kernel.__globals__)  # one line: the unsqueeze and product inside it


@pytest.mark.parametrize("rows", [1, 4])
def test_a_layer_through_weight_panels_is_one_line_with_its_steps_numbers(rows):
    """``reshape(permute(unsqueeze(x) @ panels))`` (the packed weights' linear layer) is one call
    that writes the result in its final layout; the numbers are the steps' own (the same kernel)."""
    count, k, width = 3, 64, 32
    chain = (ops.UnsqueezeOp(0), ops.MatMulOp(), ops.PermuteOp((1, 0, 2)), ops.ReshapeOp((rows, count * width)))
    fused = island(step(chain[0], ((-1, 0),)), step(chain[1], ((0, 0), (-1, 1))), step(chain[2], ((1, 0),)),
                   step(chain[3], ((2, 0),)), step(ops.ElementwiseOp("tanh"), ((3, 0),)), outputs=((4, 0),))
    rng = np.random.default_rng(2)
    x = rng.normal(size=(rows, k)).astype(np.float32)
    w = rng.normal(size=(count, k, width)).astype(np.float32)
    backend = NumPyBackend()
    by_hand = x
    for op in (*chain, ops.ElementwiseOp("tanh")):
        by_hand = backend.kernel(op)([by_hand, w] if isinstance(op, ops.MatMulOp) else [by_hand], {}, ())[0]
    kernel = backend.kernel(fused)
    for _ in range(2):  # the second call with the panels it keeps
        got, = kernel([x, w], {}, ())
        assert got.shape == by_hand.shape and got.tobytes() == by_hand.tobytes()
    assert not {"f0", "f1", "f2", "k0", "k1", "k2"} & set(kernel.__globals__)
    wide, = kernel([x, rng.normal(size=(count, k, 128)).astype(np.float32)[..., :width]], {}, ())  # not C-ordered
    assert wide.shape == (rows, count * width)  # multiplied by NumPy's steps instead


def test_layout_steps_with_constant_shapes_are_direct_calls():
    fused = island(step(ops.ReshapeOp((2, 6)), ((-1, 0),)), step(ops.PermuteOp((1, 0)), ((0, 0),)),
                   step(ops.ExpandOp((2, 6, 2)), ((1, 0),)), outputs=((2, 0),))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    kernel = NumPyBackend().kernel(fused)
    got, = kernel([x], {}, ())
    np.testing.assert_array_equal(got, np.broadcast_to(x.reshape(2, 6).T, (2, 6, 2)))
    assert not {"k0", "k1", "k2"} & set(kernel.__globals__)


def test_a_squeeze_or_reshape_of_a_step_without_inputs_is_no_product():
    """The chains of a linear layer are looked for from every squeeze and reshape: one whose input is a
    constant (a step that reads nothing) is no chain."""
    fused = island(step(ops.ConstOp(ops.Array(np.ones((1, 3), np.float32))), ()),
                   step(ops.SqueezeOp(0), ((0, 0),)), step(ops.ReshapeOp((3, 1)), ((0, 0),)),
                   outputs=((1, 0), (2, 0)))
    squeezed, reshaped = NumPyBackend().kernel(fused)([], {}, ())
    assert squeezed.shape == (3,) and reshaped.shape == (3, 1)


def attention_island(prompt: int, masked: bool = False):
    """A decoding step's attention as ``tempo.llm.program.attend`` makes it (the island's inputs: the
    key store's rows (S, batch, kv, hd), the transposed queries, the scale, the prompt's largest score
    and its scores, the value store's rows and the prompt's values); with a one-position prompt, its
    max and sum are left out as the compiler leaves them; ``masked``: the step's scores through a
    ``where`` (no attention line)."""
    E = ops.ElementwiseOp
    steps = [step(ops.PermuteOp((1, 2, 0, 3)), ((-1, 0),)),                      # 0 keys (batch, kv, S, hd)
             step(ops.MatMulOp(), ((0, 0), (-1, 1))),                             # 1 keys @ qt
             step(ops.PermuteOp((0, 1, 3, 2)), ((1, 0),)),                        # 2
             step(E("mul"), ((2, 0), (-1, 2)))]                                   # 3 scores
    scores = (3, 0)
    if masked:
        steps.append(step(E("where"), ((-1, 7), (3, 0), (-1, 8))))             # 4
        scores = (4, 0)
    b = len(steps)
    steps += [step(ops.ReduceOp("max", (-1,), keepdims=True), (scores,)),        # b
              step(E("maximum"), ((b, 0), (-1, 3))),                              # b+1 top
              step(E("sub"), (scores, (b + 1, 0))), step(E("exp"), ((b + 2, 0),)),  # b+3 weights
              step(E("sub"), ((-1, 4), (b + 1, 0))), step(E("exp"), ((b + 4, 0),)),  # b+5 the prompt's
              step(ops.ReduceOp("sum", (-1,), keepdims=True), ((b + 3, 0),))]    # b+6
    if prompt == 1:
        steps.append(step(E("add"), ((b + 6, 0), (b + 5, 0))))                  # b+7 total
    else:
        steps += [step(ops.ReduceOp("sum", (-1,), keepdims=True), ((b + 5, 0),)),
                  step(E("add"), ((b + 6, 0), (b + 7, 0)))]
    t = len(steps) - 1
    steps += [step(ops.PermuteOp((1, 2, 0, 3)), ((-1, 5),)),                      # values (batch, kv, S, hd)
              step(ops.MatMulOp(), ((b + 3, 0), (t + 1, 0))), step(ops.MatMulOp(), ((b + 5, 0), (-1, 6))),
              step(E("add"), ((t + 2, 0), (t + 3, 0))), step(E("div"), ((t + 4, 0), (t, 0))),
              step(ops.ReshapeOp((2, 3 * 2 * 64)), ((t + 5, 0),))]
    return island(*steps, outputs=((len(steps) - 1, 0),))


def attention_inputs(prompt: int, length: int = 300, seed: int = 4):
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    keys, values = normal(length + 20, 2, 3, 64)[:length], normal(length + 20, 2, 3, 64)[:length]
    qt = np.ascontiguousarray(normal(2, 3, 2, 64).transpose(0, 1, 3, 2))
    prompt_scores = normal(2, 3, 2, prompt)
    return [keys, qt, np.float32(0.125), prompt_scores.max(-1, keepdims=True), prompt_scores, values,
            normal(2, prompt, 3, 64).transpose(0, 2, 1, 3), normal(length) > -1, np.float32(-np.inf)]


def softmax_attention(inputs):
    """The attention of :func:`attention_island` in float64."""
    keys, qt, scale, _, prompt_scores, values, prompt_values = (x.astype(np.float64) for x in inputs[:7])
    scores = np.concatenate([scale * np.swapaxes(keys.transpose(1, 2, 0, 3) @ qt, -1, -2), prompt_scores], -1)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    both = np.concatenate([values.transpose(1, 2, 0, 3), prompt_values], -2)
    return ((weights @ both) / weights.sum(-1, keepdims=True)).reshape(2, -1)


@pytest.mark.parametrize("prompt", [1, 5])
def test_a_decoding_steps_attention_is_one_native_call(monkeypatch, prompt):
    """Scores, softmax and values over the step's keys and the prompt's are one call of
    ``numpy_attention.step``; the numbers are softmax attention's to float32 rounding."""
    from tempo.runtime.backends import numpy_attention
    if numpy_attention.library() is None:
        pytest.skip(numpy_attention.unavailable())
    calls = []
    real = numpy_attention.step
    monkeypatch.setattr(numpy_attention, "step", lambda *args: calls.append(args) or real(*args))
    inputs = attention_inputs(prompt)
    kernel = NumPyBackend().kernel(attention_island(prompt))
    got, = kernel(inputs, {}, ())
    assert len(calls) == 1 and got.dtype == np.float32
    np.testing.assert_allclose(got, softmax_attention(inputs), rtol=0, atol=1e-6 * np.abs(inputs[5]).max())
    assert sum(name.startswith(("f", "k")) and name[1:].isdigit() for name in kernel.__globals__) == 4  # permutes, line, reshape


@pytest.mark.parametrize("prompt", [1, 5])
def test_without_the_kernel_the_attention_line_runs_its_steps(monkeypatch, prompt):
    """Where the kernel does not apply (here: refused), the line runs the steps' own calls: the
    numbers of the island compiled without the attention line, bit for bit."""
    from tempo.runtime.backends import numpy_attention, numpy_fused
    inputs = attention_inputs(prompt)
    monkeypatch.setattr(numpy_attention, "step", lambda *args: None)
    got, = NumPyBackend().kernel(attention_island(prompt))(inputs, {}, ())
    monkeypatch.setattr(numpy_fused, "_attention_steps", lambda op, call_of: {})
    plain, = NumPyBackend().kernel(attention_island(prompt))(inputs, {}, ())
    assert got.tobytes() == plain.tobytes()
    np.testing.assert_allclose(got, softmax_attention(inputs), rtol=0, atol=1e-6 * np.abs(inputs[5]).max())


def test_a_one_position_part_of_more_positions_runs_its_steps(monkeypatch):
    """An island whose prompt part left its max and sum out (one position) given a prompt of three at
    run time is not what the kernel computes: the steps run."""
    from tempo.runtime.backends import numpy_attention
    calls = []
    monkeypatch.setattr(numpy_attention, "step", lambda *args: calls.append(args))
    inputs = attention_inputs(3)
    inputs[3] = inputs[4]  # the "largest score" as wide as the scores: NumPy broadcasts, the kernel would not
    with pytest.raises(StepFailed):  # (3 positions against 300: the steps' own shape error)
        NumPyBackend().kernel(attention_island(1))(inputs, {}, ())
    assert not calls


def test_masked_scores_are_no_attention_line(monkeypatch):
    from tempo.runtime.backends import numpy_attention
    calls = []
    monkeypatch.setattr(numpy_attention, "step", lambda *args: calls.append(args))
    inputs = attention_inputs(1)
    inputs[7][::2] = False
    got, = NumPyBackend().kernel(attention_island(1, masked=True))(inputs, {}, ())
    assert not calls and np.isfinite(got).all()
