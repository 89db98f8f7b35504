"""What the stores hold after a run does not grow with the number of iterations, and neither does its peak.

An n-step REINFORCE whose learner runs in tiles inside the acting loop has statements that depend on
nothing the loop over iterations carries (the environment's reset and its time-only state, the sinks):
each runs at its own iteration, and its points are freed once the iteration that reads them is done.
"""
from __future__ import annotations

import pytest

import tempo as tpo
from tempo.schedule import ast, shift_fusion
from tempo.transforms import tile


def reinforce(backend: str):
    """An 8-step REINFORCE learning in tiles of 5 steps, reporting its loss and mean reward through sinks."""
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tpo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), impl="tensor", obs_shape=(3, 16, 16),
                          episode_length=20)
        policy = tpo.nn.MLP(env.obs_size, [8], env.num_actions, dims=(i,), last_init_scale=0.01)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=policy(o.reshape(env.obs_size)))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        g = r[b, i, t:tpo.min(t + 8, T)].discounted_sum(0.99)
        loss = -(dist.log_prob(a) * g * tpo.rl.alive(d))[0:B, i, 0:T].mean()
        loss.backward()
        tpo.optim.Adam(policy.parameters(), lr=0.01).step()
        tpo.sink(loss, lambda value, point: None)
        tpo.sink(r[0:B, i, 0:T].mean(), lambda value, point: None)
        program = ctx.compile([], backend=backend, passes={"tile": tile.Config(tiles={"t": 5})})
    return program, (B, I, T)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_live_bytes_after_a_run_and_its_peak_do_not_grow_with_the_iterations(backend):
    if backend == "jax":
        pytest.importorskip("jax")
    program, (B, I, T) = reinforce(backend)
    assert any(isinstance(s, ast.Free) for s in ast.leaves(program.ast)), "the learner's tiles free rows"
    live, peak = {}, {}
    for iterations in (3, 7):
        program.run({B: 2, I: iterations, T: 20})
        live[iterations], peak[iterations] = program.ledger.live["device"], program.ledger.peak["device"]
    assert live[7] == live[3]
    assert peak[7] == peak[3]


def ahead_of_the_iterations(program) -> list[ast.Execute]:
    """The statements over the iteration dim that run ahead of the loop over iterations."""
    top = program.ast.body if isinstance(program.ast, ast.Sequence) else (program.ast,)
    loops = [s for s in top if isinstance(s, ast.Loop)]
    main = max(loops, key=lambda s: sum(1 for _ in ast.statements(s)))
    return [ex for s in top[:top.index(main)] for ex in ast.statements(s)
            if any(d.name == "i" for d in program.sdg.nodes[ex.node_id].domain)]


def test_statements_of_every_iteration_run_inside_the_loop_over_iterations():
    """Nothing over the iteration dim runs ahead of the loop over iterations, for every iteration at once."""
    program, _ = reinforce("numpy")
    assert ahead_of_the_iterations(program) == []


def test_what_runs_ahead_of_the_loop_over_iterations_is_freed_as_the_loop_goes(monkeypatch):
    """With the statements isl places ahead of the loop over iterations left there, their points
    are still freed once the iterations reading them are done: nothing is left after the run but
    what every iteration reads."""
    monkeypatch.setattr(shift_fusion, "_into_iteration_loop", lambda *args: None)
    program, (B, I, T) = reinforce("numpy")
    assert ahead_of_the_iterations(program)
    live = {}
    for iterations in (3, 7):
        program.run({B: 2, I: iterations, T: 20})
        live[iterations] = program.ledger.live["device"]
    assert live[7] == live[3]
