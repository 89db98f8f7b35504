"""Deallocation statements: a tensor read only at its own point is freed after its last reader."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.errors import TempoError
from tempo.schedule import ast
from tests.schedule.chains import build_chain

WIDTH = 16384  # 64 KiB per point: tempo.schedule.memory.MIN_BYTES
XS = np.random.default_rng(0).normal(size=(3, 6, WIDTH)).astype(np.float32)


def chain(ctx):
    """A per-step chain over t (kept apart by a recurrence), and a running sum read at t - 1."""
    (i, I), (t, T) = ctx.dims("i", "t")
    x = tpo.from_numpy(XS, dims=(i, t))
    s = tpo.placeholder((WIDTH,), "float32", dims=(i, t))
    s[i, 0] = x[i, 0]
    h = (s[i, t] * 2.0).tanh()
    g = h * h + 1.0
    s[i, t + 1] = g * 0.5 + x[i, t + 1]
    return [s], {I: 3, T: 6}


def compiled(build, memory=None, passes=None):
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx)
        program = ctx.compile(fetch, memory=memory, passes=passes)
    return program, program.run(bounds)


def frees(program) -> list[ast.Free]:
    return [s for s in ast.leaves(program.ast) if isinstance(s, ast.Free)]


def test_values_read_only_at_their_point_are_freed_and_the_results_do_not_change():
    (on, got), (off, want) = compiled(chain, passes={"fuse": False}), \
        compiled(chain, {"deallocate": False}, passes={"fuse": False})
    np.testing.assert_array_equal(got[0], want[0])
    freed = {f.node_id for f in frees(on)}
    assert freed and not frees(off)
    assert "free " in str(on.ast)
    state = next(n for n, node in on.sdg.nodes.items() if node.op.name == "MergeOp")
    assert state not in freed                    # read at t - 1 (the next step): iteration-level freeing
    assert on.ledger.peak["device"] < off.ledger.peak["device"]


def test_a_free_follows_every_reader_of_the_point_it_frees():
    program, _ = compiled(chain, passes={"fuse": False})
    order = [(type(s).__name__, s.node_id) for s in ast.leaves(program.ast)]
    for kind, n in order:
        if kind != "Free":
            continue
        at = order.index(("Free", n))
        readers = {e.sink for e in program.sdg.edges if e.src == n}
        assert all(order.index(("Execute", r)) < at for r in readers)


def test_a_fetched_tensor_is_never_freed():
    def build(ctx):
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS[0], dims=(t,))
        y = x.tanh()
        return [y, y * 2.0], {T: 6}

    program, (y, y2) = compiled(build, passes={"fuse": False})
    np.testing.assert_allclose(y, np.tanh(XS[0]), rtol=1e-6)
    np.testing.assert_allclose(y2, 2 * np.tanh(XS[0]), rtol=1e-6)
    fetched = {n for n, _ in program.fetch}
    assert not fetched & {f.node_id for f in frees(program)}


def test_small_static_tensors_are_left_to_the_iteration_level_freeing():
    def build(ctx):
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((4,), "float32", dims=(t,))
        s[0] = tpo.from_numpy(XS[0, 0, :4])
        s[t + 1] = (s[t] * 0.5).tanh() + 1.0
        return [s], {T: 6}

    program, _ = compiled(build, passes={"fuse": False})
    assert not frees(program)


def test_bad_memory_options_are_errors():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS[0], dims=(t,))
        with pytest.raises(TempoError, match="not a memory option"):
            ctx.compile([x], memory={"dealocate": False})
        with pytest.raises(TempoError, match="takes a bool"):
            ctx.compile([x], memory={"deallocate": "no"})


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "square", "shift", "causal", "recur", "next"]), min_size=1, max_size=5),
       st.booleans())
def test_random_programs_compute_the_same_with_and_without_deallocation(chain_ops, fuse):
    """No point is read after it is freed (a read of a freed point is an internal error), and
    the values are those of the program without frees."""
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        v, outs = build_chain(chain_ops, XS, i, t, T)
        return outs + [v], {I: 3, T: 6}

    passes = None if fuse else {"fuse": False}
    (_, got), (_, want) = compiled(build, passes=passes), compiled(build, {"deallocate": False}, passes=passes)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_value_read_at_the_next_step_is_freed_after_that_read():
    """``o[t + 1] = f(o[t])`` through a per-step value: the value at ``t - 1`` dies once ``o[t]`` copied it."""
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        o = tpo.placeholder((WIDTH,), "float32", dims=(i, t))
        o[i, 0] = tpo.from_numpy(XS[:, 0], dims=(i,))
        step = (o[i, t] * 0.5).tanh()
        o[i, t + 1] = step
        return [o], {I: 3, T: 6}

    (on, got), (_, want) = compiled(build, passes={"fuse": False}), \
        compiled(build, {"deallocate": False}, passes={"fuse": False})
    np.testing.assert_array_equal(got[0], want[0])
    freed = [f for f in frees(on) if on.sdg.nodes[f.node_id].op.name == "ElementwiseOp"]
    assert any("- 1" in str(f.point[-1]) or "-1" in str(f.point[-1]) for f in freed), [str(f) for f in freed]


def test_a_device_budget_keeps_sliced_tensors_on_the_host_and_names_what_does_not_fit():
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        o = tpo.placeholder((WIDTH,), "float32", dims=(i, t))
        o[i, 0] = tpo.from_numpy(XS[:, 0], dims=(i,))
        o[i, t + 1] = (o[i, t] * 0.5).tanh()
        return [o[i, 0:T].sum()], {I: 3, T: 6}

    (_, want), (plain, _) = compiled(build), compiled(build)
    (swapped, got) = compiled(build, {"device_budget": "1.5MB"})  # the sum reads all of o (1.2 MB) at once
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert swapped.ledger.peak["host"] > 0 and plain.ledger.peak["host"] == 0
    assert swapped.ledger.peak["device"] <= 1_500_000
    with pytest.raises(TempoError, match=r"device budget of .* cannot hold this program.*o = tpo.placeholder"):
        compiled(build, {"device_budget": "100KB"})
    with pytest.raises(TempoError, match="takes a size"):
        compiled(build, {"device_budget": "lots"})
