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
