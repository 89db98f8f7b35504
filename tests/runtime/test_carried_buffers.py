"""A buffer carried over ``t`` per layer, one row set per step (masked attention's K/V store,
TEMPO Fig. 16), stays in the device loop's carry on JAX: each step writes its row in place.

The program is a decoder in miniature whose layer ``l`` at step ``t`` sets row ``t`` of its
buffer ``buf[l, t]`` (``where(rows == t, h[l, t], buf[l, t - 1])``, zeros at ``t = 0``) and reads
the whole buffer, rows after ``t`` masked. Within the compiled loop over ``t`` (every
computation of the program but its entry, which runs once per launch) no op copies, selects
or stacks a buffer: the layers' rows stay separate arrays from step to step, the merge that
starts each buffer at ``t = 0`` passes the carried one through as it is in a launch that starts
after ``t = 0``, and the row write is a ``dynamic_update_slice`` of the carried buffer. The
tokens match NumPy's.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tempo as tpo
import tempo.api.functional as F
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

WIDTH, LAYERS, CAPACITY = 5, 3, 24
BUFFER = f"f32[{CAPACITY},{WIDTH}]"  # one layer's buffer in the compiled program's text


def decoder(backend: str):
    rng = np.random.default_rng(1)
    ws = (rng.normal(size=(LAYERS, WIDTH, WIDTH)) / 2).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(ws, dims=(l,))
        x = tpo.placeholder((WIDTH,), "float32", dims=(t,))
        x[0] = tpo.from_numpy(rng.normal(size=WIDTH).astype(np.float32))
        h = tpo.placeholder((WIDTH,), "float32", dims=(l, t))
        h[0, t] = x[t]
        rows = F.from_numpy(np.arange(CAPACITY, dtype=np.int64).reshape(CAPACITY, 1))
        previous = tpo.placeholder((CAPACITY, WIDTH), "float32", dims=(l, t))
        previous[l, 0] = tpo.zeros((CAPACITY, WIDTH), "float32")
        buf = F.where(rows == F.eval_symbol(t), F.unsqueeze(h[l, t], 0), previous[l, t])
        previous[l, t + 1] = buf[l, t]
        visible = F.from_numpy(np.arange(CAPACITY, dtype=np.int64)) <= F.eval_symbol(t)
        scores = F.where(visible, F.sum(buf * F.unsqueeze(h[l, t], 0), axis=1) * 0.3,
                         F.full((), -np.inf, "float32"))
        mixed = F.sum(F.unsqueeze(F.exp(scores - F.max(scores)), 1) * buf, axis=0)
        y = (h[l, t] @ w[l]).tanh() + mixed * 0.1
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t] * 0.9
        return ctx.compile(fetch=[x], backend=backend)


def _loop_body(text: str) -> str:
    """The compiled program's text without its entry computation."""
    return re.sub(r"\nENTRY .*?\n}\n", "\n", text, flags=re.S)


def test_the_buffers_stay_in_the_carry_and_each_step_writes_its_row_in_place():
    steps = 20
    expected = decoder("numpy")
    want = expected.run({"L": LAYERS, "T": steps})[0]
    program = decoder("jax")
    got = program.run({"L": LAYERS, "T": steps})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert program.ledger.launches < expected.ledger.launches / 4  # the loop over t ran as device launches
    texts = [fn.as_text() for compiled in program.backend.loops.values() if compiled[1] is not None
             for fn in compiled[1].fns.values() if hasattr(fn, "as_text")]
    assert texts
    body = _loop_body(texts[-1])  # a launch after t = 0
    buffer_ops = [line for line in body.splitlines() if f"= {BUFFER}" in line]
    assert any("dynamic-update-slice(" in line for line in buffer_ops)
    assert not [line for line in buffer_ops if re.search(r" (copy|select|concatenate)\(", line)]
