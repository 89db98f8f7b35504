"""Loop fusion with a shift: an n-step learner in tiles runs inside the acting loop, exactly as after it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api.compile import compile_program
from tempo.schedule import ast, shift_fusion
from tempo.transforms import tile


def reinforce(nstep: int, tiles: int | None, steps: int, fuse: bool = True, monkeypatch=None, obs=(3, 16, 16),
              memory=None):
    """REINFORCE with n-step returns (0: Monte-Carlo) and a loss averaged over the batch's steps,
    its learner in tiles of ``tiles`` rows (or of what ``memory``'s budget chooses); returns the
    fetched values and the program."""
    if not fuse:
        monkeypatch.setattr(shift_fusion, "apply", lambda *args: None)
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tpo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), impl="tensor", obs_shape=obs, episode_length=steps)
        policy = tpo.nn.MLP(env.obs_size, [16, 16], env.num_actions, dims=(i,), last_init_scale=0.01)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=policy(o.reshape(env.obs_size)))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        g = r[b, i, t:T if nstep == 0 else tpo.min(t + nstep, T)].discounted_sum(0.99)
        baseline = g[0:B, i, t].mean()
        loss = -(dist.log_prob(a) * (g - baseline) * tpo.rl.alive(d))[0:B, i, 0:T].mean()
        loss.backward()
        tpo.optim.Adam(policy.parameters(), lr=0.01).step()
        passes = {"tile": tile.Config(tiles={"t": tiles})} if tiles else {}
        weights = policy.parameters()
        bounds = {B: 3, I: 3, T: steps}  # a budget chooses tiles for the run's bounds
        program = compile_program(ctx, [loss, *weights, weights[0].grad], bounds=bounds, passes=passes,
                                  memory=memory)  # every iteration learns
        return program.run(bounds), program


def loops_around(program, node_id: int) -> list[ast.Loop]:
    """The loops around the statement executing ``node_id``, outermost first."""
    found = []

    def walk(stmt, loops):
        if isinstance(stmt, ast.Execute) and stmt.node_id == node_id:
            found.extend(loops)
        elif isinstance(stmt, ast.Sequence):
            for s in stmt.body:
                walk(s, loops)
        elif isinstance(stmt, ast.Loop):
            walk(stmt.body, loops + [stmt])
        elif isinstance(stmt, ast.If):
            walk(stmt.then, loops)
            if stmt.orelse is not None:
                walk(stmt.orelse, loops)

    walk(program.ast, [])
    return found


def tile_statements(program) -> list[int]:
    """The statements of the learner's tiles within an iteration."""
    return [ex.node_id for ex in ast.statements(program.ast)
            if [d.name for d in program.sdg.nodes[ex.node_id].domain] == ["i", "t_tile"]]


def acting_loops(program) -> tuple[ast.Loop, ast.Loop]:
    """The iteration loop and the acting loop inside it (the one writing the observations)."""
    placeholder = next(n for n, node in program.sdg.nodes.items()
                       if getattr(node.op, "placeholder", False) and [d.name for d in node.domain] == ["i", "t"])
    *_, iteration, acting = loops_around(program, placeholder)
    return iteration, acting


def learner_tiles(program) -> list[list[ast.Loop]]:
    """The loops around each tile statement run by the iteration loop."""
    iteration, _ = acting_loops(program)
    return [loops for loops in map(lambda n: loops_around(program, n), tile_statements(program))
            if any(loop is iteration for loop in loops)]


def test_an_n_step_learner_in_tiles_runs_inside_the_acting_loop(monkeypatch):
    fused, program = reinforce(nstep=4, tiles=5, steps=23)
    _, acting = acting_loops(program)
    tiles = learner_tiles(program)
    assert tiles and all(loops[-1] is acting for loops in tiles)
    after, _ = reinforce(nstep=4, tiles=5, steps=23, fuse=False, monkeypatch=monkeypatch)
    whole, _ = reinforce(nstep=4, tiles=None, steps=23)
    for f, a, w in zip(fused, after, whole):
        np.testing.assert_array_equal(f, a)
        np.testing.assert_allclose(f, w, rtol=1e-5, atol=1e-6)


def test_tiles_a_device_budget_chooses_also_run_inside_the_acting_loop():
    """No tiles given: 60 steps of 3x32x32 observations do not fit a quarter of 4 MB, so the budget
    tiles the learner, and the n-step learner runs while acting goes on."""
    budget = {"device_budget": "4MB"}
    fused, program = reinforce(nstep=4, tiles=None, steps=60, obs=(3, 32, 32), memory=budget)
    _, acting = acting_loops(program)
    tiles = learner_tiles(program)
    (_, size), = program.sdg.tiles.values()
    assert tiles and all(loops[-1] is acting for loops in tiles)
    given, _ = reinforce(nstep=4, tiles=size, steps=60, obs=(3, 32, 32))  # the same tiles, given
    for f, g in zip(fused, given):
        np.testing.assert_array_equal(f, g)


def test_monte_carlo_returns_keep_the_learner_after_the_loop():
    """What needs the returns (all of the episode's rewards) waits for the loop to end."""
    _, program = reinforce(nstep=0, tiles=5, steps=23)
    _, acting = acting_loops(program)
    assert any(loops[-1] is not acting for loops in learner_tiles(program))


def test_the_observations_a_fused_tile_learned_from_are_freed_while_acting_goes_on():
    """3 environments x 60 steps of 3x32x32 floats; tiles of 5 steps: at 8-step returns the
    observations' store holds a few tiles at a time, at Monte-Carlo returns all 60 steps."""
    row = 3 * 3 * 32 * 32 * 4  # one step of the 3 environments' observations

    def observations_at_peak(nstep: int) -> int:
        _, program = reinforce(nstep=nstep, tiles=5, steps=60, obs=(3, 32, 32))
        placeholder = next(n for n, node in program.sdg.nodes.items()
                           if getattr(node.op, "placeholder", False) and [d.name for d in node.domain] == ["i", "t"])
        return sum(v for k, v in program.ledger.peak_holders.items() if k.endswith(f"%{placeholder}"))

    assert observations_at_peak(8) <= 3 * 5 * row
    assert observations_at_peak(0) == 60 * row


def test_without_tiles_the_schedule_is_left_to_isl():
    _, program = reinforce(nstep=4, tiles=None, steps=23)
    assert "//" not in str(program.ast) and "%" not in str(program.ast).replace("Op%", "")


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(nstep=st.integers(1, 6), tiles=st.integers(1, 7), steps=st.integers(5, 19))
def test_fused_learners_compute_what_the_learner_after_the_loop_does(nstep, tiles, steps):
    with pytest.MonkeyPatch.context() as monkeypatch:
        fused, _ = reinforce(nstep, tiles, steps)
        after, _ = reinforce(nstep, tiles, steps, fuse=False, monkeypatch=monkeypatch)
    for f, a in zip(fused, after):
        np.testing.assert_array_equal(f, a)
