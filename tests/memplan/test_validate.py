"""The validator: valid solutions pass, and each broken constraint is named."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memplan_instances import random_instance

from tempo.memplan.agents.episode import Episode
from tempo.memplan.agents.heuristic import heuristic_solution
from tempo.memplan.agents.random_play import play_random
from tempo.memplan.game import GameState
from tempo.memplan.problem import Decision, Solution
from tempo.memplan.validate import Violation, is_valid, placed_reward, validate


def finished_game(seed: int, steps: int = 25, alias_rate: float = 0.15) -> GameState:
    """A random legal game played to completion (Drop-backup rewinds lost states)."""
    inst = random_instance(seed, steps=steps, alias_rate=alias_rate)
    ep = Episode(inst)
    play_random(ep, np.random.default_rng(seed))
    assert ep.game.done and not ep.game.lost
    return ep.game


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_every_legal_play_validates_and_earns_its_reward(seed):
    game = finished_game(seed)
    sol = game.solution()
    validate(game.inst, sol)
    placed = {d.buffer for d in sol.decisions if d.action != "drop"}
    assert sol.reward == pytest.approx(placed_reward(game.inst, placed))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([16, 48, 200]))
def test_heuristic_solutions_validate(seed, capacity):
    inst = random_instance(seed, steps=30, capacity=capacity)
    sol = heuristic_solution(inst)
    validate(inst, sol)
    assert sol.reward > 0


def _edit(sol: Solution, index: int, **changes) -> Solution:
    decisions = list(sol.decisions)
    decisions[index] = dataclasses.replace(decisions[index], **changes)
    return Solution(tuple(decisions), sol.reward)


def _violated(inst, sol) -> str:
    with pytest.raises(Violation) as err:
        validate(inst, sol)
    return err.value.constraint


def _placed_copy(game: GameState):
    return next(i for i, d in enumerate(game.solution().decisions)
                if d.action == "copy" and d.interval[0] < d.interval[1])


def test_each_constraint_is_detected():
    game = finished_game(3, steps=40)
    inst, sol = game.inst, game.solution()
    assert is_valid(inst, sol)
    i = _placed_copy(game)
    d = sol.decisions[i]
    b = inst.buffers[i]
    assert _violated(inst, Solution(sol.decisions[1:], sol.reward)) == "coverage"
    assert _violated(inst, _edit(sol, i, interval=None)) == "shape"
    assert _violated(inst, _edit(sol, i, offset=inst.capacity)) == "capacity"
    shifted = (d.interval[0], d.interval[1] + 1) if not b.is_output else (d.interval[0] - 1, d.interval[1])
    assert _violated(inst, _edit(sol, i, interval=shifted)) == "interval"
    assert _violated(inst, Solution(sol.decisions, sol.reward + 1.0)) == "reward"


def test_overlap_and_supply_are_detected():
    inst = random_instance(8, steps=30)
    sol = heuristic_solution(inst)
    placed = [i for i, d in enumerate(sol.decisions)
              if d.interval is not None and inst.buffers[i].alias_id is None]
    i, j = next((i, j) for i in placed for j in placed if i < j
                and sol.decisions[i].interval[1] >= sol.decisions[j].interval[0]
                and sol.decisions[i].offset != sol.decisions[j].offset
                and sol.decisions[i].offset + inst.buffers[j].size <= inst.capacity
                and not any(e.interval is None and e.action == "nocopy"
                            and inst.buffers[k].tensor_id == inst.buffers[j].tensor_id
                            for k, e in enumerate(sol.decisions)))
    moved = _edit(sol, j, offset=sol.decisions[i].offset)
    assert _violated(inst, moved) == "overlap"
    # demand far beyond the whole program's supply
    big = dataclasses.replace(inst, supply=tuple(s * 1e-6 for s in inst.supply))
    assert not is_valid(big, sol) and _violated(big, sol) in {"supply", "reward"}


def test_alias_split_is_detected():
    inst = random_instance(2, steps=30, alias_rate=0.6)
    sol = heuristic_solution(inst)
    groups = {}
    for i, b in enumerate(inst.buffers):
        if b.alias_id is not None and sol.decisions[i].action != "drop":
            groups.setdefault(b.alias_id, []).append(i)
    members = next(m for m in groups.values() if len(m) > 1)
    broken = _edit(sol, members[-1], action="drop", offset=None, interval=None)
    assert _violated(inst, broken) == "alias"


def test_nocopy_must_continue_an_allocation():
    inst = random_instance(4, steps=30)
    operand = next(i for i, b in enumerate(inst.buffers) if not b.is_output)
    b = inst.buffers[operand]
    sol = heuristic_solution(inst)
    decisions = [Decision(x.id, "drop", None, None) for x in inst.buffers]
    decisions[operand] = Decision(b.id, "nocopy", 0, (b.target_time, b.target_time))
    bad = Solution(tuple(decisions), b.benefit)
    assert _violated(inst, bad) == "interval"
    assert is_valid(inst, sol)
