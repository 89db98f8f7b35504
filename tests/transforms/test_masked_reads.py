"""The masked-reads pass: a read that grows with a loop's counter (``h[l, 0:t+1]``, a window's
``h[l, max(0, t-w+1):t+1]``) becomes a buffer of a fixed number of rows read whole, masked by the
ops that mix its rows; checked against the program without the pass on NumPy, and on JAX,
where the loop over ``t`` then runs as one device program."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.api.functional as F
from tempo.ir.ops import FusedOp
from tempo.runtime.backends import base
from tempo.transforms import masked_reads

WIDTH, LAYERS = 5, 3
ON = {"masked_reads": masked_reads.Config(enabled=True)}
OFF = {"masked_reads": False}


def decoder(backend: str, passes: dict, window: int | None = None, reduce: str = "softmax"):
    """A decoder in miniature: layer ``l`` at step ``t`` attends over ``h[l, 0:t+1]`` (or a window of it)."""
    rng = np.random.default_rng(1)
    ws = (rng.normal(size=(LAYERS, WIDTH, WIDTH)) / 2).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T) = ctx.dims("l", "t")
        w = tpo.from_numpy(ws, dims=(l,))
        x = tpo.placeholder((WIDTH,), "float32", dims=(t,))
        x[0] = tpo.from_numpy(rng.normal(size=WIDTH).astype(np.float32))
        h = tpo.placeholder((WIDTH,), "float32", dims=(l, t))
        h[0, t] = x[t]
        keys = (h[l, t] @ w[l]).tanh()
        seen = keys[l, 0:t + 1] if window is None else keys[l, tpo.max(0, t - window + 1):t + 1]
        scores = F.sum(seen * F.unsqueeze(h[l, t], 0), axis=1) * 0.5 - 3.0    # (rows,), negative
        if reduce == "softmax":
            weights = F.exp(scores - F.max(scores))
            mixed = F.matmul(F.unsqueeze(weights, 0), seen).spatial[0] / F.sum(weights)
        elif reduce == "min":
            mixed = F.min(seen, axis=0) + F.sum(F.exp(scores))
        else:
            mixed = F.mean(seen, axis=0)
        y = keys + mixed * 0.5
        h[l + 1, t] = y
        x[t + 1] = y[L - 1, t] * 0.9
        return ctx.compile(fetch=[x], backend=backend, passes=passes)


def growing_shapes(program) -> list:
    """The nodes over ``t`` whose sizes (a fused island's steps' and its reads' included) depend on a counter."""
    sdg = program.sdg

    def shapes(node):
        steps = node.op.steps if isinstance(node.op, FusedOp) else ()
        return [*node.shapes, *(shape for step in steps for shape in step.shapes),
                *(sdg.read_shape(e) for e in sdg.in_edges(node.id))]

    return [node for node in sdg.nodes.values() if any(d.name == "t" for d in node.domain)
            and any(not isinstance(s, int) and any(x.kind == "step" for x in s.free_symbols())
                    for shape in shapes(node) for s in shape)]


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("reduce", ["softmax", "min"])
def test_growing_reads_become_masked_buffers_and_compute_the_same(window, reduce):
    bounds = {"L": LAYERS, "T": 9}
    plain = decoder("numpy", OFF, window, reduce)
    masked = decoder("numpy", ON, window, reduce)
    assert growing_shapes(plain) and not growing_shapes(masked)
    np.testing.assert_allclose(masked.run(bounds)[0], plain.run(bounds)[0], rtol=1e-5, atol=1e-6)


def test_rows_given_for_the_dim_make_buffers_of_that_many_rows():
    bounds = {"L": LAYERS, "T": 9}
    plain = decoder("numpy", OFF)
    given = decoder("numpy", {"masked_reads": masked_reads.Config(enabled=True, rows={"t": 9})})
    buffers = [node for node in given.sdg.nodes.values() if any(d.name == "t" for d in node.domain)
               and any(shape[:1] == (9,) for shape in node.shapes)]
    assert buffers and not growing_shapes(given)
    np.testing.assert_allclose(given.run(bounds)[0], plain.run(bounds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window", [None, 3])
def test_masking_the_products_buffers_computes_the_same(window):
    """``mask_products``: the buffer a product reads is masked too (a backend whose products skip
    the masked rows reads the rows written so far); the values are the same."""
    bounds = {"L": LAYERS, "T": 9}
    plain = decoder("numpy", OFF, window)
    masked = decoder("numpy", ON, window)
    products = decoder("numpy", {"masked_reads": masked_reads.Config(enabled=True, mask_products=True)}, window)

    def wheres(program):
        return sum(step.op.fn == "where" for node in program.sdg.nodes.values() if isinstance(node.op, FusedOp)
                   for step in node.op.steps if hasattr(step.op, "fn"))

    assert not growing_shapes(products) and wheres(products) > wheres(masked)
    np.testing.assert_allclose(products.run(bounds)[0], plain.run(bounds)[0], rtol=1e-5, atol=1e-6)


def test_a_bound_past_the_rows_given_is_a_bound_error():
    """Buffers of 9 rows cannot hold 10 steps: the run is refused, not computed from clamped rows."""
    given = decoder("numpy", {"masked_reads": masked_reads.Config(enabled=True, rows={"t": 9})})
    given.run({"L": LAYERS, "T": 8})
    with pytest.raises(tpo.BoundError, match="more than the 9 rows"):
        given.run({"L": LAYERS, "T": 10})


def test_a_mean_over_the_rows_keeps_the_read_as_it_is():
    """A mean divides by the rows' count: rows past ``t`` would change it, so the pass leaves the read."""
    bounds = {"L": LAYERS, "T": 6}
    plain, masked = decoder("numpy", OFF, reduce="mean"), decoder("numpy", ON, reduce="mean")
    assert growing_shapes(masked) and len(masked.sdg.nodes) == len(plain.sdg.nodes)
    np.testing.assert_allclose(masked.run(bounds)[0], plain.run(bounds)[0], rtol=1e-6)


def test_the_pass_is_on_for_a_backend_that_compiles_loops_only():
    assert not base.get_backend("numpy").compiles_loops
    assert growing_shapes(decoder("numpy", {}))


@pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")
@pytest.mark.parametrize("window", [pytest.param(None, marks=pytest.mark.slow), 3])  # each compiles two programs
def test_on_jax_the_loop_over_t_is_one_device_program(window):
    want = decoder("numpy", OFF, window)
    program = decoder("jax", {}, window)
    assert not growing_shapes(program)
    launches = []
    for steps in (12, 36):
        expected = want.run({"L": LAYERS, "T": steps})[0]
        np.testing.assert_allclose(program.run({"L": LAYERS, "T": steps})[0], expected, rtol=1e-5, atol=1e-6)
        launches.append((program.ledger.launches, want.ledger.launches))
    (short, numpy_short), (long, numpy_long) = launches
    assert long - short <= 2 < numpy_long - numpy_short  # 24 steps more: launches of up to 16 steps each
