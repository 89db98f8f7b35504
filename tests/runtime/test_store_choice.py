"""Each tensor's store follows from its reads and where the schedule runs them.

The programs compile without lifting, which would turn their slice reductions into scans."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.runtime.executor import Executor
from tempo.plan.store_choice import StoreChoice, choose_stores

T_ = 12


def _choices(program, evicted=None):
    return choose_stores(program.sdg, program.ast, {n for n, _ in program.fetch}, evicted)


def _store_of(program, rt):
    return _choices(program)[program.sdg.resolve(rt.node.id, rt.out)]


def _attention():
    """k computed for every t, then read causally, through a window and in aligned blocks."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(T_, dtype=np.float64), dims=(t,))
        k = x * 2.0
        q = x + 1.0
        causal = (k[0:t + 1] * q[t]).sum()
        window = k[tpo.max(0, t - 3):t + 1].sum()
        blocks = q[(t // 4) * 4:(t // 4) * 4 + 4].sum()
        program = ctx.compile(fetch=[causal, window, blocks], passes={"fuse": False, "lift": False})
    return program, k, q


def _recurrence(fetch_x: bool = False):
    """x[t + 1] reads a window of x itself, so x's writer and reader share one loop."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.placeholder(shape=(3,), dtype="float64", dims=(t,))
        x[0] = tpo.full((3,), 1.0, "float64")
        mean = x[tpo.max(0, t - 3):t + 1].mean(axis=0)
        x[t + 1] = x[t] * 0.5 + mean
        program = ctx.compile(fetch=[mean, x] if fetch_x else [mean], passes={"fuse": False, "lift": False})
    return program, x


def test_a_causal_window_and_block_read_tensor_gets_one_dim_long_block():
    program, k, q = _attention()
    assert _store_of(program, k) == StoreChoice("block", None)
    assert _store_of(program, q) == StoreChoice("block", 4)  # only aligned blocks (and points)


def test_a_window_read_by_the_writers_own_loop_gets_a_window_store():
    program, x = _recurrence()
    assert _store_of(program, x) == StoreChoice("window", 4)


def _episodes():
    """h runs an episode over t per iteration i; the next iteration starts from h[i, T - 1]."""
    ctx = tpo.Context()
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        p = tpo.placeholder((2,), "float64", dims=(i,))
        p[0] = tpo.full((2,), 0.1, "float64")
        h = tpo.placeholder((2,), "float64", dims=(i, t))
        h[i, 0] = p[i]
        h[i, t + 1] = tpo.tanh(h[i, t] * 0.9 + h[i, tpo.max(0, t - 4):t + 1].mean(axis=0) * 0.5)
        p[i + 1] = p[i] * 0.5 + h[i, T - 1] * 0.5
        program = ctx.compile(fetch=[p], passes={"fuse": False, "lift": False})
    return program, h


def test_a_window_read_after_the_writers_loop_at_the_bound_keeps_the_window_store():
    program, h = _episodes()
    assert _store_of(program, h) == StoreChoice("window", 5)
    bounds = {"I": 3, "T": 9}
    np.testing.assert_array_equal(program.run(bounds)[0], program.run(bounds, stores="point")[0])


def test_a_fetched_tensor_is_kept_whole():
    program, x = _recurrence(fetch_x=True)
    assert _store_of(program, x) == StoreChoice("block", None)


def test_a_tensor_freed_along_its_innermost_dim_keeps_point_stores_unless_blocks_are_aligned():
    program, k, q = _attention()
    choices = _choices(program, evicted={k.node.id: 0, q.node.id: 0})
    assert choices[(k.node.id, k.out)] == StoreChoice("point")  # a dim-long block would outlive its rows
    assert choices[(q.node.id, q.out)] == StoreChoice("block", 4)  # freed block by block


def test_dynamic_shapes_point_reads_and_scalars_stay_in_point_stores():
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(T_, dtype=np.float64), dims=(t,))
        prefix = x[0:t + 1] * 2.0  # shape (t + 1,): varies per point
        later = prefix[0:t + 1].sum(axis=0)
        previous = x * 3.0
        shifted = previous[tpo.max(0, t - 1)] + 1.0
        program = ctx.compile(fetch=[later, shifted], passes={"fuse": False, "vectorize": False, "lift": False})
    choices = _choices(program)
    assert choices[(prefix.node.id, 0)] == StoreChoice("point")
    assert choices[(previous.node.id, 0)] == StoreChoice("point")
    assert all(c == StoreChoice("point") for (n, _), c in choices.items() if not program.sdg.nodes[n].domain)


@pytest.mark.parametrize("make", [_attention, _recurrence])
def test_chosen_stores_compute_what_point_stores_compute(make):
    program = make()[0]
    for chosen, point in zip(program.run({"T": T_}), program.run({"T": T_}, stores="point")):
        np.testing.assert_array_equal(chosen, point)


def test_window_store_memory_is_flat_in_the_bound():
    program, x = _recurrence()
    held = []
    for bound in (20, 400):
        executor = Executor(program.sdg, program.ast, program.backend, {"T": bound}, keep={n for n, _ in program.fetch})
        executor.run()
        held.append(executor.stores[program.sdg.resolve(x.node.id, x.out)].nbytes())
    assert held == [2 * 4 * 3 * 8] * 2


def test_kernels_read_block_views_and_user_functions_get_copies_of_windows():
    """x[t + 1] = x[t] + step(x[max(0, t - 1):t + 1]), step a user function in x's own loop;
    a sink reads y causally."""
    seen = {"window": [], "causal": []}

    def step(window):
        seen["window"].append(window)
        return window.sum()

    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        x[0] = tpo.full((), 1.0, "float64")
        summed = tpo.udf(step, [x[tpo.max(0, t - 1):t + 1]], [()], ["float64"])
        x[t + 1] = x[t] + summed
        y = tpo.from_numpy(np.arange(8.0), dims=(t,)) * 2.0
        tpo.sink(y[0:t + 1], lambda value, point: seen["causal"].append(value))
        program = ctx.compile(fetch=[summed], passes={"fuse": False, "lift": False})
    executor = Executor(program.sdg, program.ast, program.backend, {"T": 8}, keep={n for n, _ in program.fetch})
    executor.run()
    window, block = (executor.stores[program.sdg.resolve(r.node.id)] for r in (x, y))
    assert (window.kind, block.kind) == ("window", "block")
    assert all(np.shares_memory(v, block.blocks[(0,)]) for v in seen["causal"])
    xs = [1.0]
    for u in range(1, 8):
        xs.append(xs[-1] + sum(xs[max(0, u - 2):u]))
    for u, value in enumerate(seen["window"]):  # copies: the circular buffer has moved on since
        np.testing.assert_array_equal(value, xs[max(0, u - 1):u + 1])
    np.testing.assert_array_equal(seen["causal"][-1], 2 * np.arange(8.0))


def test_an_unknown_store_choice_is_an_error():
    program, _ = _recurrence()
    with pytest.raises(TempoError, match="stores='dense' is not a store choice"):
        program.run({"T": 4}, stores="dense")


def test_an_island_output_read_at_its_point_is_freed_though_another_is_read_causally():
    """k and q computed by one fused island in a recurrence; k is read causally (kept from 0),
    q only at t: q's points are freed after each iteration, not kept as long as k's."""
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        x[0] = tpo.full((), 0.5, "float64")
        shared = x * 2.0
        k, q = shared.exp(), (shared + 1.0).tanh() ** 2.0
        scores = (k[0:t + 1] * q[t]).sum()
        x[t + 1] = scores * 0.01
        program = ctx.compile(fetch=[scores], passes={"lift": False})
    (island,) = [n for n in program.sdg.nodes.values() if len(n.shapes) == 2]
    executor = Executor(program.sdg, program.ast, program.backend, {"T": T_}, keep={n for n, _ in program.fetch})
    executor.run()
    held = [executor.stores[(island.id, j)] for j in range(2)]
    assert sorted(s.kind for s in held) == ["block", "point"]
    assert len(next(s for s in held if s.kind == "point").data) <= 1
    xs, ks, want = [0.5], [], []
    for _ in range(T_):
        ks.append(np.exp(xs[-1] * 2.0))
        want.append(sum(ks) * np.tanh(xs[-1] * 2.0 + 1.0) ** 2)
        xs.append(want[-1] * 0.01)
    np.testing.assert_allclose(program.run({"T": T_})[0], want)
