"""Step order: sums and products over a loop dim's steps give the same bits with or without
trailing steps that hold 0.

A program drawn by hypothesis runs episodes over ``t`` (a recurrence per
episode ``b`` of iteration ``i``, each ended by a threshold) and reduces
over their steps: sums, means, a discounted sum, and the gradient of a
layer applied at every step (a product contracting over ``t``, and products
whose rows are steps). Ended at run time (``tpo.end_when``, ``T[i]`` the
batch's longest episode) and padded to the cap with the steps past each
episode's end masked, the two programs are equal bit for bit on NumPy, torch
(CPU) and JAX (CPU), the padded one asking for it on torch and JAX
(``tpo.Config(step_order="exact")``); without asking, a program whose dims
all run to their bounds keeps torch's and JAX's own kernels.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.ir import ops
from tempo.runtime.backends import base
from tempo.transforms import step_order


def installed(name: str, *marks) -> pytest.param:
    """The backend ``name`` as a test parameter, skipped where it is not installed."""
    return pytest.param(name, marks=[pytest.mark.skipif(name not in base.available_backends(),
                                                        reason=f"{name} is not installed"), *marks])


BACKENDS = ["numpy", installed("torch"), installed("jax")]
DRAWN_ON = ["numpy", installed("torch"), installed("jax", pytest.mark.slow)]  # JAX compiles each drawn shape: ~15 s


EXACT = tpo.Config(step_order="exact")


def build(us, feats, w0, decay: float, threshold: float, dynamic: bool, parts: frozenset, passes=None,
          backend: str = "numpy", config: tpo.Config | None = None):
    """Episodes ``s[t + 1] = decay * s[t] + u[t + 1]`` ended past ``threshold``; the reductions of
    ``parts`` over the batch's steps (masked past each episode's end), and a layer's weights ``w``
    trained on them by SGD, iteration after iteration."""
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        u = tpo.from_numpy(us, dims=(b, i, t))
        x = tpo.from_numpy(feats, dims=(b, i, t))
        w = tpo.nn.parameter(w0, dims=(i,))  # trained: iteration i + 1 reads i's
        s = tpo.placeholder((), "float32", dims=(b, i, t))
        s[b, i, 0] = u[b, i, 0]
        s[b, i, t + 1] = s[b, i, t] * decay + u[b, i, t + 1]
        ended = (s > threshold).cast("float32")
        done = tpo.placeholder((), "float32", dims=(b, i, t))  # 1 from the step an episode ends
        done[b, i, 0] = ended[b, i, 0]
        done[b, i, t + 1] = tpo.max(done[b, i, t], ended[b, i, t + 1])
        alive = tpo.placeholder((), "float32", dims=(b, i, t))  # 1 up to and including that step
        alive[b, i, 0] = tpo.ones((), "float32")
        alive[b, i, t + 1] = 1.0 - done[b, i, t]
        running = tpo.placeholder((), "float32", dims=(i, t))  # 1 while some episode has not ended
        running[i, 0] = tpo.ones((), "float32")
        running[i, t + 1] = 1.0 - done[0:B, i, t].min()
        if dynamic:
            tpo.end_when(done[0:B, i, t] > 0.5)
        h = (x.unsqueeze(0) @ w).squeeze(0).tanh()                  # a layer at every step
        y = (h * h).sum() * s * alive
        steps = running[i, 0:T].sum() * tpo.from_numpy(np.float32(len(us)))  # the batch's rows up to T[i]
        fetch = [(y[0:B, i, 0:T].sum() / alive[0:B, i, 0:T].sum())]  # the gradient's loss
        if "sum" in parts:
            fetch.append((s * alive)[0:B, i, 0:T].sum())
        if "mean" in parts:
            fetch.append((s * alive)[0:B, i, 0:T].mean() if dynamic else (s * alive)[0:B, i, 0:T].sum() / steps)
        if "discounted" in parts:
            fetch.append((s * alive)[b, i, 0:T].discounted_sum(0.9))
        if "returns" in parts:
            fetch.append((s * alive)[b, i, t:T].discounted_sum(0.9))
        fetch[0].backward()
        tpo.optim.SGD([w], lr=0.1).step()
        fetch.append(w)
        return ctx.compile(fetch=fetch, passes=passes, backend=backend, config=config)


drawn = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(2, 160), st.integers(0, 2 ** 16),
                  st.floats(0.5, 1.0), st.floats(1.0, 30.0),
                  st.sets(st.sampled_from(["sum", "mean", "discounted", "returns"])))


def equal(ended, got, full) -> list[bool]:
    """Per output of the ended and the padded program: whether they hold the same bits (at each
    step the ended one has, for the returns over ``(b, i, t)``: the last output but one with
    ``returns``)."""
    lengths = ended.lengths["T"]
    same = []
    for a, p in zip(got, full):
        if a.shape != p.shape or a.ndim != 3 or not np.isnan(a).any():
            same.append(np.array_equal(a, p))
            continue
        within = np.broadcast_to(np.arange(a.shape[2])[None, None, :] < lengths[None, :, None], a.shape)
        same.append(np.array_equal(a[within], p[within]))
    return same


@pytest.mark.parametrize("backend", DRAWN_ON)
@settings(deadline=None, max_examples=8)
@given(drawn)
def test_an_ended_program_equals_the_padded_masked_one_bit_for_bit(backend, case):
    episodes, iterations, cap, seed, decay, threshold, parts = case
    rng = np.random.default_rng(seed)
    us = rng.uniform(0.0, 1.0, (episodes, iterations, cap)).astype(np.float32)
    feats = rng.normal(0.0, 1.0, (episodes, iterations, cap, 5)).astype(np.float32)
    w0 = rng.normal(0.0, 0.5, (5, 7)).astype(np.float32)
    args = (us, feats, w0, decay, threshold)
    ended = build(*args, True, frozenset(parts), backend=backend)
    padded = build(*args, False, frozenset(parts), backend=backend, config=EXACT)
    bounds = {"B": episodes, "I": iterations, "T": cap}
    got, full = ended.run(bounds), padded.run(bounds)
    assert all(equal(ended, got, full))


def marks(program) -> list[ops.Op]:
    steps = [s.op for n in program.sdg.nodes.values() for s in getattr(n.op, "steps", ())]
    return steps + [n.op for n in program.sdg.nodes.values()]


def marked(op: ops.Op) -> bool:
    return bool(getattr(op, "ordered", False) or getattr(op, "ordered_rows", ()) or getattr(op, "ordered_inner", False))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_marks_are_made_where_the_backend_and_the_config_ask(backend):
    """On torch and JAX a program whose dims run to their bounds keeps the backend's kernels unless
    the config asks for step order; one with a dim that ends at run time, and every program on
    NumPy, is marked."""
    rng = np.random.default_rng(0)
    us = rng.uniform(0.0, 1.0, (2, 2, 12)).astype(np.float32)
    feats = rng.normal(0.0, 1.0, (2, 2, 12, 5)).astype(np.float32)
    args = (us, feats, rng.normal(0.0, 0.5, (5, 7)).astype(np.float32), 0.9, 3.0)
    parts = frozenset(["sum", "mean", "discounted", "returns"])
    padded = build(*args, False, parts, backend=backend, config=tpo.Config())  # not the environment's
    assert any(marked(op) for op in marks(padded)) == (backend == "numpy")
    for program in (build(*args, False, parts, backend=backend, config=EXACT), build(*args, True, parts, backend=backend)):
        found = [op for op in marks(program) if marked(op)]
        assert {type(op) for op in found} >= {ops.ReduceOp, ops.DiscountedSumOp, ops.BatchContractOp, ops.MatMulOp}


def test_the_environment_asks_for_step_order(monkeypatch):
    monkeypatch.setenv("TEMPO_STEP_ORDER", "exact")
    assert tpo.Config.from_env().step_order == "exact"
    monkeypatch.setenv("TEMPO_STEP_ORDER", "exactly")
    with pytest.raises(tpo.TempoError, match="TEMPO_STEP_ORDER takes 'auto' or 'exact', got 'exactly'"):
        tpo.Config.from_env()
    with pytest.raises(tpo.TempoError, match=r"Config\(step_order=...\) takes"):
        tpo.Config(step_order="fast")


def test_sums_over_a_loop_dim_are_marked_and_sums_over_a_batch_dim_are_not():
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        x = tpo.from_numpy(np.ones((2, 3, 4), np.float32), dims=(b, i, t))
        s = tpo.placeholder((), "float32", dims=(b, i, t))
        s[b, i, 0] = x[b, i, 0]
        s[b, i, t + 1] = s[b, i, t] + x[b, i, t + 1]               # a recurrence: t is a loop
        over_b = s[0:B, i, t].sum()
        over_t = s[b, i, 0:T].sum()
        program = ctx.compile(fetch=[over_b, over_t], passes={"fuse": False})
    sums = {n.shapes[0]: n.op for n in program.sdg.nodes.values()
            if isinstance(n.op, ops.ReduceOp) and n.op.fn == "sum"}
    assert any(op.ordered for op in sums.values())
    assert any(not op.ordered for op in sums.values())
    over_b_out, over_t_out = program.run({"B": 2, "I": 3, "T": 4})
    np.testing.assert_array_equal(over_t_out, np.full((2, 3), 10.0))
    np.testing.assert_array_equal(over_b_out, np.tile([2.0, 4.0, 6.0, 8.0], (3, 1)))


def test_a_layers_gradient_over_the_steps_is_an_ordered_contraction_and_its_rows_ordered_products():
    rng = np.random.default_rng(0)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        w = tpo.nn.parameter(rng.normal(size=(3, 2)).astype(np.float32), dims=(i,))
        v = tpo.nn.parameter(rng.normal(size=(2, 2)).astype(np.float32), dims=(i,))
        o = tpo.placeholder((3,), "float32", dims=(i, t))
        o[i, 0] = tpo.from_numpy(np.ones(3, np.float32))
        o[i, t + 1] = o[i, t] * 0.5
        h = ((o.unsqueeze(0) @ w).tanh() @ v).squeeze(0)
        loss = h[i, 0:T].sum()
        loss.backward()
        tpo.optim.SGD([w, v], lr=0.1).step()
        program = ctx.compile(fetch=[w], passes={"fuse": False})
    found = marks(program)
    assert any(isinstance(op, ops.BatchContractOp) and op.ordered for op in found)
    assert any(isinstance(op, ops.MatMulOp) and op.ordered_rows for op in found)


def test_the_pass_leaves_a_program_without_loops_as_it_is():
    with tpo.Context() as ctx:
        x = tpo.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
        program = ctx.compile(fetch=[x.sum()], passes={"fuse": False})
    assert step_order.apply(program.sdg) is program.sdg


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_the_pass_the_programs_part(backend):
    """The check above can fail: summed in the backend's and BLAS's own order, the two programs
    round apart over enough steps."""
    rng = np.random.default_rng(0)
    us = rng.uniform(0.0, 1.0, (3, 2, 160)).astype(np.float32)
    feats = rng.normal(0.0, 1.0, (3, 2, 160, 5)).astype(np.float32)
    w0 = rng.normal(0.0, 0.5, (5, 7)).astype(np.float32)
    args = (us, feats, w0, 0.99, 8.0)  # T = 19 and 18 steps, the cap 160
    bounds = {"B": 3, "I": 2, "T": 160}
    parts = frozenset(["sum", "mean", "discounted"])
    ended, padded = (build(*args, dynamic, parts, passes={"step_order": False},
                           backend=backend) for dynamic in (True, False))
    assert not all(equal(ended, ended.run(bounds), padded.run(bounds)))


def test_a_slice_that_grows_with_the_step_is_left_in_the_backends_order():
    """Causal attention reads the keys ``k[0:t + 1]``: their count does not depend on where the
    dim ends, so its softmax and its products are not marked (decoding keeps NumPy's order)."""
    from tempo.llm import program as program_mod
    from tempo.llm.attention import Attention
    from tempo.llm.config import LlamaConfig
    from tempo.llm.sampling import Sampling
    from tempo.llm.weights import Weights

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, max_positions=128)
    with tpo.Context() as ctx:
        dp = program_mod.build(config, Weights.random(config, 0), np.array([[1, 2, 3, 4]]), Attention(), Sampling())
        program = ctx.compile(fetch=[dp.tokens], passes={**program_mod.compile_passes(dp, None, 2), "fuse": False})
    found = marks(program)
    assert any(isinstance(op, ops.ReduceOp) and op.fn == "sum" for op in found)
    assert not any(getattr(op, "ordered", False) or getattr(op, "ordered_rows", ()) or getattr(op, "ordered_inner", False)
                   for op in found)
