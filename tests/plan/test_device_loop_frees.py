"""The frees of a loop the device runs whole (tempo/plan/device_loops.py): a launch frees only the
points a host store holds (a value the device computes and does not write back never reaches one)."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import base
from tempo.schedule import ast
from tests.rl.tensor_cartpole import acting
from tests.runtime.test_ended_device_loops import episodes
from tests.runtime.test_whole_run import reinforce

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")


def unheld_frees(sdg, plan, writers=frozenset(), written_back=()) -> list[tuple[int, int]]:
    """The (node, output) pairs ``plan`` (and its nested loops) free that no host store holds while it
    runs whole: outputs of nodes the outermost loop's launch computes (``writers``) and does not write back."""
    if not writers:
        writers = {s.node.id for s in plan.steps} | {s.node.id for n in plan.nested for s in n.plan.steps}
        written_back = plan.written_back
    loose = [(free.node_id, j) for free, _ in plan.frees for j in free.freed(len(sdg.nodes[free.node_id].shapes))
             if free.node_id in writers and (free.node_id, j) not in written_back]
    return loose + [key for n in plan.nested for key in unheld_frees(sdg, n.plan, writers, written_back)]


def frees_own_values(plan) -> bool:
    """Whether the schedule frees, inside ``plan``'s loop, values the loop computes."""
    writers = {s.node.id for s in plan.steps} | {s.node.id for n in plan.nested for s in n.plan.steps}
    return any(isinstance(s, ast.Free) and s.node_id in writers for s in ast.leaves(plan.loop))


def cartpole():
    """REINFORCE on CartPole written as tensor ops, one episode per iteration (``tpo.end_when``), its
    loss over the steps the episode is alive (the loop over t computes the step and ``alive`` in one
    fused op: some of its outputs stay on the device, one is written back), run for a few steps."""
    with tpo.Context(seed=0) as ctx:
        ((b, B), (i, I), (t, T)), policy, dist, a, r, d = acting(ctx, 8)
        g = r[b, i, t:T].discounted_sum(0.99)
        alive = tpo.rl.alive(d)
        (-(dist.log_prob(a) * g * alive)[0:B, i, 0:T].sum() / alive[0:B, i, 0:T].sum()).backward()
        tpo.optim.Adam(policy.parameters(), lr=1e-2).step()
        program = ctx.compile([r[0:B, i, 0:T].sum()], backend="jax")
    program.run({B: 1, I: 3, T: 40})
    return program


def test_the_training_loop_frees_no_value_it_keeps_on_the_device():
    program = cartpole()
    assert any(frees_own_values(p) for p in program.plan.loops)
    for plan in program.plan.loops:
        assert unheld_frees(program.sdg, plan) == []


def test_the_whole_run_frees_no_value_it_keeps_on_the_device(tmp_path):
    program, _ = reinforce(tmp_path, "jax")
    assert "over c0 as one device launch" in program.code
    for plan in program.plan.loops:
        assert unheld_frees(program.sdg, plan) == []


def test_a_loop_over_an_ended_dim_frees_no_value_it_keeps_on_the_device():
    xs = np.random.default_rng(0).normal(size=(3, 6, 4)).astype(np.float32) * 0.3
    program, _ = episodes(xs, 1.5, None, "jax", reads="learner")
    assert any(p.end is not None or p.ending is not None for p in program.plan.loops)
    assert any(frees_own_values(p) for p in program.plan.loops)
    for plan in program.plan.loops:
        assert unheld_frees(program.sdg, plan) == []
