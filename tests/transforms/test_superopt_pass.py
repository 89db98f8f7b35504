"""The superopt pass: islands rewritten by tempo.superopt's searches compute what they computed."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir.ops import FusedOp, PermuteOp
from tempo.transforms import PIPELINE, superopt

XS = np.random.default_rng(1).standard_normal((5, 4, 3)).astype(np.float32)
W = (np.random.default_rng(2).standard_normal((3, 3)) * 0.5).astype(np.float32)
V = (np.random.default_rng(3).standard_normal((3, 2)) * 0.5).astype(np.float32)
GREEDY = superopt.Config(agent="greedy", budget_s=2.0, sizes={"T": 5})


def layers(ctx):
    """Two layers at every step ``t`` on a (4, 3) input, with a double transpose in the way."""
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS, dims=(t,))
    w, v = tpo.from_numpy(W), tpo.from_numpy(V)
    h = (x @ w.permute(1, 0).permute(1, 0)).tanh()
    y = h @ v + 1.0
    return [h, y], {T: 5}


# The islands as the program writes them: every pass but vectorization, fusion and this one is off
# (a simplification before fusion would remove the double transposes these tests look for).
AS_WRITTEN = {name: False for name, _ in PIPELINE if name not in ("vectorize", "fuse", "superopt")}


def compiled(build, passes):
    with tpo.Context(seed=0) as ctx:
        fetch, bounds = build(ctx)
        program = ctx.compile(fetch, passes={**AS_WRITTEN, **passes})
        return program, program.run(bounds)


def steps(program) -> list:
    return [step.op for node in program.sdg.nodes.values() if isinstance(node.op, FusedOp)
            for step in node.op.steps]


def test_the_pass_removes_a_double_transpose_and_keeps_the_values():
    plain, (h0, y0) = compiled(layers, {})
    rewritten, (h, y) = compiled(layers, {"superopt": GREEDY})
    want_h = np.tanh(XS @ W)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, want_h @ V + 1.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h0, rtol=1e-6)
    np.testing.assert_allclose(y, y0, rtol=1e-6)
    before, after = steps(plain), steps(rewritten)
    assert sum(isinstance(op, PermuteOp) for op in before) == 2
    assert not any(isinstance(op, PermuteOp) for op in after)
    assert len(after) <= len(before) - 2


def test_the_pass_is_off_unless_an_agent_is_named():
    plain, _ = compiled(layers, {})
    default, _ = compiled(layers, {"superopt": superopt.Config()})
    assert [type(op) for op in steps(default)] == [type(op) for op in steps(plain)]


def test_an_unknown_agent_is_an_error_naming_the_agents():
    with pytest.raises(TempoError, match="greedy, backtrack, eqsat, rl"):
        compiled(layers, {"superopt": superopt.Config(agent="taso")})


def test_a_size_for_a_bound_the_program_does_not_have_is_an_error():
    with pytest.raises(TempoError, match=r"names B, not a bound of this program \(its bounds: T\)"):
        compiled(layers, {"superopt": superopt.Config(agent="greedy", sizes={"B": 4})})


def test_the_rl_agent_rewrites_islands_measured_on_the_runtime_kernels():
    plain, (h0, y0) = compiled(layers, {})
    rewritten, (h, y) = compiled(layers, {"superopt": superopt.Config(agent="rl", budget_s=3.0, sizes={"T": 5})})
    np.testing.assert_allclose(h, h0, rtol=1e-6)
    np.testing.assert_allclose(y, y0, rtol=1e-6)
    assert sum(isinstance(op, PermuteOp) for op in steps(plain)) == 2
    assert not any(isinstance(op, PermuteOp) for op in steps(rewritten))


def rl_program(ctx):
    """A batch of episodes (vectorized ``b``) of a tanh policy on a random walk, and a
    gradient-like update of its weights over iterations ``i``; the policy transposes its
    input twice, which vectorization turns into two rank-3 permutes."""
    (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
    w = tpo.placeholder((3, 2), "float32", dims=(i,))
    w[0] = tpo.from_numpy(W[:, :2])
    s = tpo.placeholder((3,), "float32", dims=(b, i, t))
    s[b, i, 0] = tpo.random.normal((3,), dims=(b, i))
    logits = (s.unsqueeze(0).permute(1, 0).permute(1, 0) @ w).squeeze(0).tanh()
    s[b, i, t + 1] = s * 0.9 + logits.sum() * 0.1
    loss = (logits * logits).sum() * 0.5
    grad = (s.unsqueeze(-1) * (logits * (1.0 - logits * logits)).unsqueeze(0))[0:B, i, 0:T].sum(axis=(0, 1))
    w[i + 1] = w - grad * 0.01
    return [loss, w], {B: 4, I: 3, T: 6}


def test_a_vectorized_rl_program_trains_the_same_with_its_islands_rewritten():
    plain, (loss0, w0) = compiled(rl_program, {})
    rewritten, (loss, w) = compiled(rl_program, {"superopt": superopt.Config(agent="backtrack", budget_s=1.0,
                                                                              sizes={"B": 4, "T": 6})})
    np.testing.assert_allclose(loss, loss0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w, w0, rtol=1e-5, atol=1e-6)
    permutes = [sum(isinstance(op, PermuteOp) for op in steps(p)) for p in (plain, rewritten)]
    assert permutes[1] <= permutes[0] - 2
