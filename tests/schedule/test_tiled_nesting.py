"""Which schedule a tiled program gets: shift fusion's, where the learner's tiles run inside acting's loop and
free large rows of acting's output as they go (the tiles' point: memory), else the nested loops of
:func:`tempo.schedule.orderings.nesting`, whose loops may run as device programs. Both compute the same
values, bit for bit, on the NumPy backend."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.api import compile as compile_mod
from tempo.api.compile import compile_program
from tempo.schedule import ast
from tempo.transforms import tile


def reinforce(nstep: int, tiles: int | None, steps: int, obs=(3, 4, 4), backend: str = "numpy", runs=None,
              returns=lambda window: window.discounted_sum(0.99)):
    """REINFORCE on tensor environments with n-step returns (0: Monte-Carlo), the learner in tiles of
    ``tiles`` steps (None: the tiles the compiler chooses), and sinks of each iteration's rewards (tiled
    too) and optimizer state; returns the values the sinks saw, and the program. ``runs``: the steps of
    each run of the one program compiled (default: ``steps``), which then returns each run's values and
    launches; ``returns``: each step's return from its window of rewards."""
    reported = []
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tpo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), impl="tensor", obs_shape=obs, episode_length=steps)
        policy = tpo.nn.MLP(env.obs_size, [8], env.num_actions, dims=(i,), last_init_scale=0.01)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=policy(o.reshape(env.obs_size)))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        g = returns(r[b, i, t:T if nstep == 0 else tpo.min(t + nstep, T)])
        loss = -(dist.log_prob(a) * g * tpo.rl.alive(d))[0:B, i, 0:T].mean()
        loss.backward()
        adam = tpo.optim.Adam(policy.parameters(), lr=0.01)
        adam.step()
        for n, x in enumerate((r[0:B, i, 0:T].sum(), next(iter(adam.state_dict().values())).sum())):
            tpo.sink(x, lambda value, point, n=n: reported.append((n, point["i"], np.array(value))))
        program = compile_program(ctx, [], backend=backend, bounds={B: 2, I: 3, T: steps},
                                  passes=None if tiles is None else {"tile": tile.Config(tiles={"t": tiles})})
        each = []
        for n in runs or (steps,):
            reported.clear()
            program.run({B: 2, I: 3, T: n})
            each.append(([value for _, _, value in sorted(reported, key=lambda x: x[:2])], program.ledger.launches))
        return (each if runs else each[0][0]), program


def fused(monkeypatch, *args, **kwargs):
    """:func:`reinforce` with shift fusion's schedule kept whatever the tiles free while acting."""
    with monkeypatch.context() as patch:
        patch.setattr(compile_mod, "tiles_freed_while_acting", lambda sdg, program: True)
        return reinforce(*args, **kwargs)


def loops_around(stmt, node_id: int, loops=()) -> list[tuple[ast.Loop, ...]]:
    """The loops around each statement executing ``node_id``, outermost first."""
    if isinstance(stmt, ast.Execute):
        return [loops] if stmt.node_id == node_id else []
    if isinstance(stmt, ast.Sequence):
        return [x for s in stmt.body for x in loops_around(s, node_id, loops)]
    if isinstance(stmt, ast.Loop):
        return loops_around(stmt.body, node_id, (*loops, stmt))
    if isinstance(stmt, ast.If):
        return loops_around(stmt.then, node_id, loops) + \
            (loops_around(stmt.orelse, node_id, loops) if stmt.orelse is not None else [])
    return []


def over(program, *names: str) -> list[int]:
    """The executed nodes whose dims are ``names``."""
    return sorted({ex.node_id for ex in ast.statements(program.ast)
                   if tuple(d.name for d in program.sdg.nodes[ex.node_id].domain) == names})


def acting_loops(program) -> tuple[ast.Loop, ...]:
    """The loops around the statement that writes the observations (a placeholder over ``(i, t)``)."""
    placeholder = next(n for n, node in program.sdg.nodes.items()
                       if getattr(node.op, "placeholder", False) and [d.name for d in node.domain] == ["i", "t"])
    (loops,) = loops_around(program.ast, placeholder)
    return loops


@pytest.mark.parametrize("nstep, tiles, steps", [(3, 4, 10), (0, 3, 9)])
def test_tiles_that_free_nothing_large_while_acting_get_the_nested_loops(monkeypatch, nstep, tiles, steps):
    """3x4x4 observations: the tiles free no large rows while acting, so every statement over ``i`` runs
    in one loop over ``i``, acting's loop and the tiles' loops nested in it, and the values are those of
    shift fusion's schedule, bit for bit (tiles that do not divide T included)."""
    nested, program = reinforce(nstep, tiles, steps)
    (main,) = {loops[0] for n in over(program, "i") + over(program, "i", "t") + over(program, "i", "t_tile")
               for loops in loops_around(program.ast, n)}
    assert main is program.plan.main_loop and acting_loops(program)[0] is main and len(acting_loops(program)) == 2
    reference, other = fused(monkeypatch, nstep, tiles, steps)
    assert other.ast != program.ast
    for x, y in zip(nested, reference):
        np.testing.assert_array_equal(x, y)


def test_tiles_that_free_large_rows_while_acting_keep_shift_fusion():
    """3x16x16 observations and 3-step returns: the learner's tiles run inside acting's loop (they read
    rows of acting's output written in the same loop, in slices of a size that changes at the last
    tile), and that loop stays on the host."""
    _, program = reinforce(3, 4, 10, obs=(3, 16, 16))
    acting = acting_loops(program)[-1]
    assert all(acting in loops for n in over(program, "i", "t_tile") for loops in loops_around(program.ast, n)
               if program.plan.main_loop in loops and "Merge" not in program.sdg.nodes[n].op.name)
    assert all(p.loop is not acting for p in program.plan.loops)
