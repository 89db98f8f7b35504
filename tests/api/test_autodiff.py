"""Symbolic autodiff: every op against central finite differences, temporal reads and
recurrences included, and a composite program against torch.autograd."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tempo as tpo
from tempo.api import functional as F
from tempo.api.vjp import VJP, pad
from tempo.ir import ops

RNG = np.random.default_rng(0)


def finite_difference_check(build: Callable, arrays: dict[str, np.ndarray], dims: dict[str, tuple] | None = None,
                            bounds: dict[str, int] | None = None, eps: float = 1e-6, tol: float = 1e-6):
    """Gradients of ``sum over points of build(**rts)`` vs central differences of the same program.

    The inputs are ``from_numpy`` constants; the compiled program is re-run with their
    arrays perturbed in place, so the finite differences use Tempo's own forward pass.
    """
    dims, bounds = dims or {}, bounds or {}
    with tpo.Context() as ctx:
        declared = dict(zip(bounds, ctx.dims(*bounds)))
        steps = {name: step for name, (step, _) in declared.items()}
        bound_symbols = {name.upper(): bound for name, (_, bound) in declared.items()}
        rts = {k: tpo.from_numpy(a.astype(np.float64), dims=tuple(steps[d] for d in dims.get(k, ())))
               for k, a in arrays.items()}
        loss = build(**rts, **steps, **bound_symbols)
        loss.backward()
        program = ctx.compile(fetch=[loss] + [rts[k].grad for k in arrays])
    run_bounds = {bound_symbols[n.upper()]: v for n, v in bounds.items()}
    outputs = program.run(run_bounds)
    for k, grad in zip(arrays, outputs[1:]):
        stored = rts[k].node.op.value.array
        expected = np.zeros_like(stored)
        for idx in np.ndindex(*stored.shape):
            saved = stored[idx]
            stored[idx] = saved + eps
            plus = np.nansum(program.run(run_bounds)[0])
            stored[idx] = saved - eps
            minus = np.nansum(program.run(run_bounds)[0])
            stored[idx] = saved
            expected[idx] = (plus - minus) / (2 * eps)
        assert grad.shape == expected.shape, k
        np.testing.assert_allclose(grad, expected, rtol=tol, atol=tol, err_msg=f"gradient of {k}")


def arr(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape)


POSITIVE = dict(low=0.5, high=2.0)

# name -> (loss builder, inputs)
SPATIAL_CASES = {
    "neg": (lambda x: (-x * x).sum(), {"x": arr(3)}),
    "exp": (lambda x: x.exp().sum(), {"x": arr(3)}),
    "log": (lambda x: x.log().sum(), {"x": arr(3, **POSITIVE)}),
    "sqrt": (lambda x: x.sqrt().sum(), {"x": arr(3, **POSITIVE)}),
    "abs": (lambda x: (x.abs() * x).sum(), {"x": arr(4)}),
    "sin": (lambda x: x.sin().sum(), {"x": arr(3)}),
    "cos": (lambda x: x.cos().sum(), {"x": arr(3)}),
    "tanh": (lambda x: x.tanh().sum(), {"x": arr(3)}),
    "sigmoid": (lambda x: x.sigmoid().sum(), {"x": arr(3)}),
    "relu": (lambda x: (x.relu() * x).sum(), {"x": arr(4)}),
    "add_broadcast": (lambda a, b: ((a + b) ** 2.0).sum(), {"a": arr(3, 4), "b": arr(4)}),
    "sub_broadcast": (lambda a, b: ((a - b) ** 2.0).sum(), {"a": arr(3, 1), "b": arr(1, 4)}),
    "mul": (lambda a, b: (a * b * a).sum(), {"a": arr(2, 3), "b": arr(2, 3)}),
    "div": (lambda a, b: (a / b).sum(), {"a": arr(2, 3), "b": arr(2, 3, **POSITIVE)}),
    "pow": (lambda a, b: (a ** b).sum(), {"a": arr(3, **POSITIVE), "b": arr(3)}),
    "maximum": (lambda a, b: tpo.max(a, b).sum(), {"a": arr(5), "b": arr(5)}),
    "minimum": (lambda a, b: tpo.min(a, b).sum(), {"a": arr(5), "b": arr(5)}),
    "where": (lambda a, b: tpo.where(a > b, a * a, b * 3.0).sum(), {"a": arr(5), "b": arr(5)}),
    "sum_axis": (lambda x: (x.sum(axis=1) ** 2.0).sum(), {"x": arr(2, 3)}),
    "sum_keepdims": (lambda x: (x.sum(axis=0, keepdims=True) * x).sum(), {"x": arr(2, 3)}),
    "mean": (lambda x: (x.mean(axis=0) ** 2.0).sum(), {"x": arr(3, 2)}),
    "max": (lambda x: (x.max(axis=1) ** 2.0).sum(), {"x": arr(2, 4)}),
    "min": (lambda x: (x.min() * x).sum(), {"x": arr(2, 4)}),
    "cumsum": (lambda x: (x.cumsum(1) ** 2.0).sum(), {"x": arr(2, 4)}),
    "discounted_sum": (lambda x: (x.discounted_sum(0.9, axis=1) ** 2.0).sum(), {"x": arr(2, 4)}),
    "matmul_2d": (lambda a, b: ((a @ b) ** 2.0).sum(), {"a": arr(2, 3), "b": arr(3, 4)}),
    "matmul_vec_mat": (lambda a, b: ((a @ b) ** 2.0).sum(), {"a": arr(3), "b": arr(3, 4)}),
    "matmul_mat_vec": (lambda a, b: ((a @ b) ** 2.0).sum(), {"a": arr(2, 3), "b": arr(3)}),
    "matmul_vec_vec": (lambda a, b: (a @ b) ** 2.0, {"a": arr(3), "b": arr(3)}),
    "matmul_batched": (lambda a, b: ((a @ b) ** 2.0).sum(), {"a": arr(2, 2, 3), "b": arr(3, 2)}),
    # queries at positions 3-6 over keys at 1-5 within a window of 3, the keys shared by both query heads
    "attention": (lambda q, k, v: (F.attention(q, k, v, 0.5, rows=3, cols=1, window=3) ** 2.0).sum(),
                  {"q": arr(2, 4, 3), "k": arr(1, 5, 3), "v": arr(1, 5, 2)}),
    "reshape": (lambda x, w: (x.reshape(3, 2) * w).sum(), {"x": arr(2, 3), "w": arr(3, 2)}),
    "permute": (lambda x, w: (x.permute(1, 0) * w).sum(), {"x": arr(2, 3), "w": arr(3, 2)}),
    "expand": (lambda x, w: (x.expand(3, 2) * w).sum(), {"x": arr(1, 2), "w": arr(3, 2)}),
    "squeeze": (lambda x, w: (x.squeeze(0) * w).sum(), {"x": arr(1, 3), "w": arr(3)}),
    "unsqueeze": (lambda x, w: (x.unsqueeze(1) * w).sum(), {"x": arr(3), "w": arr(3, 1)}),
    "cat": (lambda a, b, w: (tpo.cat([a, b], axis=1) * w).sum(), {"a": arr(2, 1), "b": arr(2, 2),
                                                                  "w": arr(2, 3)}),
    "spatial_index": (lambda x: (x.spatial[1, 1:3] ** 2.0).sum() + x.spatial[0, 0], {"x": arr(2, 4)}),
    # rows taken twice and one never taken, along the last axis and the first
    "take": (lambda x, w: (F.take(x, F.argsort(w.spatial[0]), axis=1) ** 2.0).sum()
             + (F.take(x, tpo.from_numpy(np.array([2, 0, 2])), axis=0) * w).sum(),
             {"x": arr(3, 4), "w": arr(3, 4)}),
    "pad": (lambda x, w: (pad(x, 1, 1, 2) * w).sum(), {"x": arr(2, 2), "w": arr(2, 5)}),
    "cast": (lambda x: (x.cast("float32").cast("float64") * x).sum(), {"x": arr(3)}),
    "ident": (lambda x: (x.ident() * x).sum(), {"x": arr(3)}),
}


@pytest.mark.parametrize("name", sorted(SPATIAL_CASES))
def test_spatial_op_gradients_match_finite_differences(name):
    build, arrays = SPATIAL_CASES[name]
    # a float32 round trip needs a step far above float32's resolution
    eps, tol = (1e-2, 1e-4) if name == "cast" else (1e-6, 1e-6)
    finite_difference_check(build, arrays, eps=eps, tol=tol)


def test_every_differentiable_op_has_a_rule_and_a_test():
    after_autodiff = {ops.Op, ops.FusedOp, ops.ScanOp, ops.LinearScanOp, ops.BatchContractOp}  # made by passes
    assert set(VJP) >= {cls for cls in vars(ops).values()
                        if isinstance(cls, type) and issubclass(cls, ops.Op) and cls not in after_autodiff}
    covered = {ops.ElementwiseOp, ops.ReduceOp, ops.CumSumOp, ops.DiscountedSumOp, ops.MatMulOp,
               ops.ReshapeOp, ops.PermuteOp, ops.ExpandOp, ops.SqueezeOp, ops.UnsqueezeOp, ops.CatOp,
               ops.SpatialIndexOp, ops.PadOp, ops.CastOp, ops.IdentOp, ops.MergeOp, ops.TakeOp, ops.AttentionOp}
    leaves = {ops.ConstOp, ops.EvalSymbolOp, ops.RandomOp, ops.UDFOp, ops.ArgSortOp}
    assert covered | leaves == set(VJP)


# name -> (loss builder over steps, inputs, dims of each input, bounds)
TEMPORAL_CASES = {
    "coarser_point": (lambda x, t, **_: (x[t // 2] * x).sum(), {"x": arr(6, 2)}, {"x": ("t",)}),
    "future_slice": (lambda x, t, T, **_: x[t:T].discounted_sum(0.9).sum(), {"x": arr(5, 2)}, {"x": ("t",)}),
    "past_window": (lambda x, t, **_: (x[tpo.max(0, t - 2):t + 1].mean(axis=0) ** 2.0).sum(),
                    {"x": arr(5, 2)}, {"x": ("t",)}),
    "nstep_window": (lambda x, t, T, **_: x[t:tpo.min(t + 2, T)].sum() ** 2.0, {"x": arr(5)}, {"x": ("t",)}),
    "block": (lambda x, t, **_: x[(t // 2) * 2:(t // 2) * 2 + 2].sum() * x, {"x": arr(6)}, {"x": ("t",)}),
    "constant_slice": (lambda x, w, T, **_: (x[0:T] ** 2.0).sum() * w.sum(), {"x": arr(4), "w": arr(4)},
                       {"x": ("t",)}),
    "constant_point": (lambda x, w, t, **_: x[2] * w * w, {"x": arr(4), "w": arr(4)},
                       {"x": ("t",), "w": ("t",)}),
    "broadcast_over_dim": (lambda x, w, **_: (x * w).sum() ** 2.0, {"x": arr(3), "w": arr(4, 3)},
                           {"w": ("t",)}),
    "two_dims": (lambda x, i, t, T, **_: x[i, t:T].sum() * x[i, 0], {"x": arr(2, 4)}, {"x": ("i", "t")}),
}


@pytest.mark.parametrize("name", sorted(TEMPORAL_CASES))
def test_temporal_reads_accumulate_gradients_over_the_inverse(name):
    build, arrays, dims = TEMPORAL_CASES[name]
    names = sorted({d for ds in dims.values() for d in ds} | {"t"})
    sizes = {"i": 2, "t": 4}
    for k, ds in dims.items():
        sizes.update({d: arrays[k].shape[ds.index(d)] for d in ds})
    finite_difference_check(build, arrays, dims, {n: sizes[n] for n in names})


def test_gradients_flow_only_into_the_taken_branch_of_a_recurrence():
    def build(x, t):
        s = tpo.placeholder((2,), "float64", dims=(t,))
        s[0] = x[0] * 3.0
        s[t + 1] = s[t] * x[t + 1] + x[t]
        return (s * s).sum()

    finite_difference_check(lambda x, t, **_: build(x, t), {"x": arr(4, 2)}, {"x": ("t",)}, {"t": 4})


def test_conditional_branches_by_condition():
    def build(x, t):
        s = tpo.placeholder((), "float64", dims=(t,))
        s[(t % 2) == 0] = x * x
        s[(t % 2) == 1] = -x * 2.0
        return s

    finite_difference_check(lambda x, t, **_: build(x, t), {"x": arr(5)}, {"x": ("t",)}, {"t": 5})


def test_composite_program_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    T, d, h = 6, 3, 4
    x0, w1, b1, w2 = arr(T, d), arr(d, h), arr(h), arr(h)
    with tpo.Context() as ctx:
        (t, T_), = ctx.dims("t")
        x = tpo.from_numpy(x0, dims=(t,))
        W1, B1, W2 = tpo.from_numpy(w1), tpo.from_numpy(b1), tpo.from_numpy(w2)
        hidden = (x @ W1 + B1).tanh()
        out = hidden @ W2
        causal = out[0:t + 1].mean()
        anti_causal = out[t:T_].discounted_sum(0.9)
        window = out[tpo.max(0, t - 1):t + 1].sum()
        loss = causal * anti_causal + window.sigmoid()
        loss.backward()
        got = ctx.run({T_: T}, fetch=[loss, x.grad, W1.grad, B1.grad, W2.grad])

    tx, tw1, tb1, tw2 = (torch.tensor(a, requires_grad=True) for a in (x0, w1, b1, w2))
    o = torch.tanh(tx @ tw1 + tb1) @ tw2
    losses = []
    for step in range(T):
        disc = sum(0.9 ** k * o[step + k] for k in range(T - step))
        losses.append(o[:step + 1].mean() * disc + torch.sigmoid(o[max(0, step - 1):step + 1].sum()))
    torch.stack(losses).sum().backward()
    np.testing.assert_allclose(got[0], torch.stack(losses).detach().numpy(), rtol=1e-10)
    for mine, theirs in zip(got[1:], (tx, tw1, tb1, tw2)):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_backward_adds_no_cast_to_a_dtype_a_gradient_already_has():
    """Every VJP casts its gradient to its primal's dtype; where they agree (nearly always)
    that is the gradient itself, not a CastOp the fuse pass would have to carry."""
    with tpo.Context() as ctx:
        x = tpo.from_numpy(arr(3, 4).astype(np.float32))
        w = tpo.from_numpy(arr(4, 2).astype(np.float32))
        assert x.cast("float32") is x and x.cast(np.float32) is x
        half = x.cast("float16")
        assert isinstance(half.node.op, ops.CastOp)
        loss = ((x @ w).tanh() * 2.0).sum() + half.cast("float32").sum()
        loss.backward()
        casts = [n.op.dtype for n in ctx.sdg.nodes.values() if isinstance(n.op, ops.CastOp)]
    assert sorted(casts) == ["float16", "float16", "float32", "float32"]   # the two casts and their VJPs


def test_backward_needs_a_scalar_loss():
    with tpo.Context():
        x = tpo.from_numpy(np.ones(3))
        with pytest.raises(tpo.ShapeError, match=r"backward\(\) needs a loss of spatial shape \(\)") as info:
            x.backward()
    assert "test_autodiff.py" in str(info.value)


def test_grad_before_backward_is_an_error():
    with tpo.Context():
        x = tpo.from_numpy(np.ones(3))
        with pytest.raises(tpo.TempoError, match="call loss.backward"):
            _ = x.grad


def test_a_read_that_cannot_be_inverted_names_the_users_line():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.ones(4), dims=(t,))
        y = x[tpo.max(0, t - 1)] * x
        with pytest.raises(tpo.TempoError, match=r"cannot invert the dependence max\(0, t - 1\)") as info:
            y.backward()
    assert "y = x[tpo.max(0, t - 1)] * x" in str(info.value)


def test_stop_gradient_blocks_the_gradient():
    with tpo.Context() as ctx:
        x = tpo.from_numpy(np.array([1.0, 2.0]))
        loss = (x * tpo.stop_gradient(x)).sum()
        loss.backward()
        grad, = ctx.run({}, fetch=[x.grad])
    np.testing.assert_allclose(grad, [1.0, 2.0])


def test_what_is_read_only_through_stop_gradient_gets_no_backward_pass():
    """A detached value (PPO's acting log-probabilities, say) adds no gradient work at its points."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        w = tpo.from_numpy(RNG.normal(size=(3, 3)))
        x = tpo.from_numpy(RNG.normal(size=(4, 3)), dims=(t,))
        acted = (x @ w).tanh()                      # computed per t, then detached
        learned = (x @ w).tanh()
        loss = (learned * acted.detach()).sum()
        loss.backward()
        grad, = ctx.run({T: 4}, fetch=[w.grad])
    assert (acted.node.id, acted.out) not in ctx.grads and (learned.node.id, learned.out) in ctx.grads
    with pytest.raises(tpo.TempoError, match="no gradient"):
        acted.grad
    matmuls = sum(1 for n in ctx.sdg.nodes.values() if isinstance(n.op, ops.MatMulOp))
    assert matmuls == 2 + 2                     # two forward products, two backward ones (for w and x)
    assert grad.shape == (3, 3) and np.isfinite(grad).all()
