"""A loop over ``t`` holding loops over ``l`` as one device program, shaped like decoding (TEMPO Fig. 16).

The program is a decoder in miniature: at step ``t`` a token ``x[t]`` enters layer 0,
``y[l, t]``, layer ``l`` applied to ``h[l, t]`` and to a per-layer buffer carried over ``t``
(``buf[l, t + 1]`` is ``buf[l, t]`` plus ``h[l, t]``, the K/V store's part), is ``h[l + 1, t]``,
the next token is read from the last layer (``y[L - 1, t]``), and an ``ended`` flag (``ended[0] =
seen[0]``, then ``ended[t] | seen[t + 1]``) ends ``t``. The planner lifts, each checked on
the plan: a nested loop made only of the buffer's merges; rows a nested loop wrote read
row by row by another, in the same step and one step later (carried over ``t``); a read of
the last layer's row; a merge branch pinned to ``t = 0`` reading a value of the same step;
and the end check. The JAX run is checked against NumPy's for several ``k``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import tempo as tpo
from tempo.ir.ops import MergeOp
from tempo.plan.loop_plan import LOCAL, ROW, STACKED
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

WIDTH, LAYERS = 4, 3


def decoder(threshold: float | None, every: int | None, backend: str):
    """The miniature decoder (see the module docstring); ``threshold`` None: no end check."""
    rng = np.random.default_rng(0)
    ws = (rng.normal(size=(LAYERS, WIDTH, WIDTH)) / 2).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(ws, dims=(l,))
        x = tpo.placeholder((WIDTH,), "float32", dims=(t,))
        x[0] = tpo.from_numpy(rng.normal(size=WIDTH).astype(np.float32) * 0.1)
        h = tpo.placeholder((WIDTH,), "float32", dims=(l, t))
        h[0, t] = x[t]
        buf = tpo.placeholder((WIDTH,), "float32", dims=(l, t))
        buf[l, 0] = tpo.zeros((WIDTH,), "float32")
        summed = buf[l, t] + h[l, t]
        buf[l, t + 1] = summed[l, t]
        y = (h[l, t] @ w[l]).tanh() + summed * 0.1
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t] * 0.9
        fetch = [x]
        if threshold is not None:
            seen = x[t].sum() > threshold
            ended = tpo.placeholder((), "bool", dims=(t,))
            ended[0] = seen[0]
            ended[t + 1] = ended[t] | seen[t + 1]
            tpo.end_when(ended[t])
            fetch.append(ended)
        program = ctx.compile(fetch=fetch, backend=backend, config=tpo.Config(end_check_every=every))
    return program


def _over_t(program):
    (plan,) = [p for p in program.plan.loops if p.nested]
    return plan


def test_the_loop_over_t_is_planned_with_its_loops_over_l():
    plan = _over_t(decoder(1.0, None, "jax"))
    assert plan.end is not None and plan.steps[plan.end].node.op.label == "end_when"
    assert any(all(isinstance(s.node.op, MergeOp) for s in n.plan.steps) for n in plan.nested)  # buffer merges
    stacked = [src for n in plan.nested for _, src in n.inputs if src.kind == STACKED]
    assert {src.shift for src in stacked} == {0, 1}  # this step's buffer rows, and last step's
    assert any(src.key in plan.carried for src in stacked if src.shift == 1)
    assert any(src.kind == ROW for step in plan.steps for src in step.inputs)  # y[L - 1, t]
    merges = [s for s in plan.steps if isinstance(s.node.op, MergeOp) and s.node.op.name == "MergeOp"
              and s.node.dtypes[0] == "bool"]
    assert any(src.kind == LOCAL for s in merges for src in s.inputs)  # ended[0] = seen[0], at t = 0


@pytest.mark.parametrize("every", [None, 1, 4])
def test_the_decoder_on_jax_matches_numpy_for_every_k(every):
    cap = 40
    expected = decoder(0.26, None, "numpy")
    want = expected.run({"L": LAYERS, "T": cap})
    length = int(expected.lengths["T"])
    assert 1 < length < cap  # the flag holds before the cap
    program = decoder(0.26, every, "jax")
    got = program.run({"L": LAYERS, "T": cap})
    assert int(program.lengths["T"]) == length
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5, equal_nan=True)
    check = program.end_checks["T"]
    assert check.steps == length and check.reads == math.ceil(length / min(every or 64, cap))
    assert program.ledger.launches < expected.ledger.launches / 4


def test_the_decoder_without_a_check_matches_numpy():
    want = decoder(None, None, "numpy").run({"L": LAYERS, "T": 20})
    program = decoder(None, None, "jax")
    got = program.run({"L": LAYERS, "T": 20})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert _over_t(program).end is None
