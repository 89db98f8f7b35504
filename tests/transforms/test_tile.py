"""The tiling pass: a vectorized learner over ``t`` runs in tiles, its sums accumulated over the tiles."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.ir import ops
from tempo.schedule import ast
from tempo.transforms import tile


def acting(ctx, X: np.ndarray):
    """A state ``w`` over ``i`` and a recurrence ``o`` over ``t`` that reads it (acting)."""
    (i, I), (t, T) = ctx.dims("i", "t")
    x = tpo.from_numpy(X, dims=(i, t))
    w = tpo.placeholder((X.shape[-1],), "float32", dims=(i,))
    w[0] = tpo.from_numpy(np.ones(X.shape[-1], np.float32))
    o = tpo.placeholder((X.shape[-1],), "float32", dims=(i, t))
    o[i, 0] = x[i, 0] * w[i]
    o[i, t + 1] = o[i, t] * 0.5 + x[i, t + 1]
    return (i, I), (t, T), x, w, o


def recurrent_learner(ctx, X: np.ndarray, ahead: int):
    """Acting, n-step sums and a learner summing over all of ``t``, whose result updates the
    state over ``i``: the learner is vectorized over ``t``."""
    (i, I), (t, T), x, w, o = acting(ctx, X)
    g = x[i, t:tpo.min(t + ahead, T)].sum(axis=0)
    total = (o * g * w[i]).tanh()[i, 0:T].sum(axis=0)
    w[i + 1] = w[i] - 0.01 * total[i]
    return total, (I, T)


def reference(X: np.ndarray, ahead: int) -> np.ndarray:
    iterations, steps, _ = X.shape
    w, out = np.ones(X.shape[-1], np.float32), []
    for k in range(iterations):
        o = np.zeros_like(X[k])
        o[0] = X[k, 0] * w
        for s in range(steps - 1):
            o[s + 1] = o[s] * 0.5 + X[k, s + 1]
        g = np.stack([X[k, s:min(s + ahead, steps)].sum(0) for s in range(steps)])
        total = np.tanh(o * g * w).sum(0)
        out.append(total)
        w = w - 0.01 * total
    return np.array(out)


def compiled(X: np.ndarray, ahead: int, size: int | None, memory=None, passes_default=False):
    with tpo.Context() as ctx:
        total, (I, T) = recurrent_learner(ctx, X, ahead)
        passes = {"tile": tile.Config(tiles={"t": size})} if size else {"tile": False}
        passes = {} if passes_default else passes
        program = ctx.compile([total], passes=passes, memory=memory)
    return program, {I: X.shape[0], T: X.shape[1]}


def tiled_nodes(program):
    return [n for n in program.sdg.nodes.values() if any(d.name == "t_tile" for d in n.domain)]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 12), st.integers(1, 14), st.integers(1, 4), st.integers(1, 3))
def test_tiled_learners_compute_what_the_numpy_loop_does(steps, size, ahead, iterations):
    X = np.random.default_rng(steps * 31 + size).standard_normal((iterations, steps, 3)).astype(np.float32)
    program, bounds = compiled(X, ahead, size)
    (got,) = program.run(bounds)
    np.testing.assert_allclose(got, reference(X, ahead), rtol=2e-5, atol=2e-5)
    assert tiled_nodes(program), "the learner is tiled"


def test_the_tile_dim_bound_follows_from_t():
    X = np.random.default_rng(0).standard_normal((2, 10, 3)).astype(np.float32)
    program, bounds = compiled(X, 4, 3)
    assert program.sdg.tiles == {"T_TILE": ("T", 3)}
    assert "T_TILE" in program.domains.params
    program.run(bounds)  # only I and T are given
    tiles = [n for n in tiled_nodes(program) if isinstance(n.op, ops.FusedOp)]
    assert any(step.shapes and step.shapes[0] and "t_tile" in str(step.shapes[0][0])
               for n in tiles for step in n.op.steps)  # a tile of rows


def test_the_sum_over_t_becomes_a_running_sum_freed_tile_by_tile():
    X = np.random.default_rng(1).standard_normal((2, 12, 3)).astype(np.float32)
    program, _ = compiled(X, 2, 4)
    merges = [n for n in tiled_nodes(program) if isinstance(n.op, ops.MergeOp)]
    assert len(merges) == 1, "one accumulator, over the tiles"
    untiled, _ = compiled(X, 2, None)
    assert not tiled_nodes(untiled)
    assert not any(isinstance(n.op, ops.MergeOp) and n.op.broadcast for n in untiled.sdg.nodes.values())


def recurrent_wide_learner(ctx, X: np.ndarray):
    """A learner whose per-tile partial result is a large (256 x 256) product: the running sum's
    steps are freed one step back."""
    (i, I), (t, T), _, w, o = acting(ctx, X)
    outer = o.unsqueeze(1) @ (o * w[i]).unsqueeze(0)
    total = outer[i, 0:T].sum(axis=0)
    w[i + 1] = w[i] - 1e-4 * total[i].sum(axis=0)
    return total, (I, T)


def test_the_running_sum_frees_each_step_after_the_next_tile_reads_it():
    X = np.random.default_rng(2).standard_normal((2, 16, 256)).astype(np.float32)
    out = []
    for size in (4, None):
        with tpo.Context() as ctx:
            total, (I, T) = recurrent_wide_learner(ctx, X)
            passes = {"tile": tile.Config(tiles={"t": size})} if size else {"tile": False}
            program = ctx.compile([total], passes=passes)
        out.append(program.run({I: 2, T: 16})[0])
        if size:
            accumulators = {n.id for n in tiled_nodes(program) if isinstance(n.op, ops.FusedOp)
                            and any(isinstance(s.op, ops.ElementwiseOp) and s.op.fn == "add" for s in n.op.steps)}
            freed = {leaf.node_id for leaf in ast.leaves(program.ast) if isinstance(leaf, ast.Free)}
            assert accumulators & freed
    np.testing.assert_allclose(out[0], out[1], rtol=1e-4, atol=1e-3)


def two_recurrences_learner(ctx, X: np.ndarray):
    """A learner reading two recurrent tensors of acting whole, each by its own reader."""
    (i, I), (t, T), x, w, o = acting(ctx, X)
    q = tpo.placeholder((X.shape[-1],), "float32", dims=(i, t))
    q[i, 0] = x[i, 0]
    q[i, t + 1] = q[i, t] * 0.25 + x[i, t + 1]
    total = (o * w[i]).tanh()[i, 0:T].sum(axis=0) + (q * w[i]).sin()[i, 0:T].sum(axis=0)
    w[i + 1] = w[i] - 0.01 * total[i]
    return total, (I, T)


def test_a_budget_counts_every_tensor_the_learner_reads_whole():
    """Each of ``o`` and ``q`` over all of ``t`` (16 rows of 256 B) fits a quarter of the budget; the
    learner, one launch once fused, reads both: the budget tiles it."""
    X = np.random.default_rng(3).standard_normal((2, 16, 64)).astype(np.float32)
    budget, out = 24_000, []
    for memory_passes in (None, {"tile": tile.Config(device_budget=budget, bounds={"I": 2, "T": 16})}):
        with tpo.Context() as ctx:
            total, (I, T) = two_recurrences_learner(ctx, X)
            program = ctx.compile([total], passes=memory_passes or {"tile": False})
        out.append(program.run({I: 2, T: 16})[0])
    row_bytes = 2 * 64 * 4  # a row of o and one of q
    assert 16 * row_bytes // 2 < budget * tile.WHOLE_SHARE < 16 * row_bytes
    assert program.sdg.tiles == {"T_TILE": ("T", int(budget * tile.TILE_SHARE) // row_bytes)}
    np.testing.assert_allclose(out[1], out[0], rtol=1e-5, atol=1e-6)


def train(example: str, size: int | str | None, memory=None, obs="3,8,8", steps=24, **options):
    """The returns of ``examples/<example>.py`` on tempo/Synthetic-v0, tiled in ``size`` rows
    (None: untiled; "auto": as a device budget in ``memory`` chooses), and its program."""
    from tempo.api import compile as compile_mod

    from benchmarks.rl_train import _example

    module = _example(example)
    original, programs = compile_mod.compile_program, []

    def with_tiles(*args, **kwargs):
        if size != "auto":
            kwargs["passes"] = {"tile": tile.Config(tiles={"t": size})} if size else {"tile": False}
        if memory:
            kwargs["memory"] = memory
        programs.append(original(*args, **kwargs))
        return programs[-1]

    compile_mod.compile_program = with_tiles
    try:
        args = module.Args(env="tempo/Synthetic-v0", impl="tensor", obs_shape=obs, batch=3, steps=steps,
                           iterations=3, hidden=16, **options)
        return module.main(args)["returns"], programs[0]
    finally:
        compile_mod.compile_program = original


def reinforce_returns(size, nstep: int, memory=None, obs="3,8,8", steps=24):
    return train("reinforce", size, memory, obs, steps, nstep=nstep)[0]


@pytest.mark.parametrize("nstep", [0, 4])
def test_a_tiled_reinforce_learner_trains_exactly_as_the_untiled_one(nstep):
    assert reinforce_returns(5, nstep) == reinforce_returns(None, nstep)


def test_tiles_let_a_learner_fit_a_device_budget_that_the_whole_batch_exceeds():
    budget = {"device_budget": "2MB"}  # observations of one iteration: 3 x 24 x 3x32x32 floats = 864 KiB
    with pytest.raises(tpo.TempoError, match="device budget"):
        reinforce_returns(None, 0, budget, obs="3,32,32", steps=48)
    assert reinforce_returns(6, 0, budget, obs="3,32,32", steps=48) == reinforce_returns(None, 0, obs="3,32,32",
                                                                                         steps=48)


def test_a_device_budget_chooses_the_tiles_itself():
    budget = {"device_budget": "2MB"}
    returns, program = train("reinforce", "auto", budget, obs="3,32,32", steps=48, nstep=0)
    assert program.sdg.tiles and returns == reinforce_returns(None, 0, obs="3,32,32", steps=48)
    _, roomy = train("reinforce", "auto", {"device_budget": "1GB"}, obs="3,32,32", steps=48, nstep=0)
    assert not roomy.sdg.tiles  # what fits is left whole


def test_a_tiled_ppo_learner_trains_exactly_as_the_untiled_one():
    """PPO's learner reads its batch in explicit slices (``x[0:B, k, 0:T]``): the axis is not the
    leading one, its weight gradients are products contracting it, and the value function over
    the batch feeds a scan over the dim (GAE), which reads the tiles put back together."""
    tiled, program = train("ppo_fixed_horizon", 5, epochs=2)
    assert tiled == train("ppo_fixed_horizon", None, epochs=2)[0]
    kinds = {type(n.op).__name__ for n in tiled_nodes(program)}
    assert "MergeOp" in kinds and "PadOp" in str(program.sdg)
    # the tile's island hands on its accumulations one tile later and its rows at once: each
    # output is freed after its own last reader
    assert any(isinstance(leaf, ast.Free) and leaf.outputs for leaf in ast.leaves(program.ast))


def test_bad_tile_configs_are_errors():
    with pytest.raises(tpo.TempoError, match="positive number of rows"):
        tile.Config(tiles={"t": 0})
    with pytest.raises(tpo.TempoError, match="positive number of rows"):
        tile.Config(tiles={"t": 2.5})
    X = np.random.default_rng(3).standard_normal((2, 6, 3)).astype(np.float32)
    with tpo.Context() as ctx:
        total, _ = recurrent_learner(ctx, X, 2)
        with pytest.raises(tpo.TempoError, match="names dim 'x'.*its dims: i, t"):
            ctx.compile([total], passes={"tile": tile.Config(tiles={"x": 4})})


def test_tempo_tiles_tiles_every_compile_and_rejects_a_bad_value(monkeypatch):
    X = np.random.default_rng(4).standard_normal((2, 6, 3)).astype(np.float32)
    monkeypatch.setenv("TEMPO_TILES", "t:2")
    program, bounds = compiled(X, 2, None, passes_default=True)
    assert program.sdg.tiles == {"T_TILE": ("T", 2)}
    np.testing.assert_allclose(program.run(bounds)[0], reference(X, 2), rtol=2e-5, atol=2e-5)
    monkeypatch.setenv("TEMPO_TILES", "t:two")
    with pytest.raises(tpo.TempoError, match="TEMPO_TILES takes dim:size"):
        compiled(X, 2, None, passes_default=True)
