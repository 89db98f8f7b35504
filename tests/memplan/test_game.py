"""MMapGame dynamics on hand-built programs: every rule of §4.2 and Appendix A."""
from __future__ import annotations

import time

import numpy as np
import pytest
from memplan_instances import random_instance

from tempo.memplan.agents.episode import Episode
from tempo.memplan.game import COPY, DROP, NOCOPY, GameState
from tempo.memplan.problem import Buffer, Instance, LatencyTable
from tempo.memplan.validate import validate


def make(capacity, supply, rows, latencies=()):
    """rows: (size, is_output, target, tensor, alias, live_range, demand, benefit)."""
    buffers = tuple(Buffer(i, *row) for i, row in enumerate(rows))
    return Instance(capacity, tuple(float(s) for s in supply), buffers, latencies=latencies)


def test_copy_of_operand_starts_at_latest_step_covering_demand():
    inst = make(10, [1, 1, 1, 1, 1], [(4, False, 3, 0, None, (0, 3), 2.0, 1.0)])
    game = GameState(inst)
    place = game.options()[COPY]
    assert place.interval == (1, 3) and place.offset == 0
    assert game.step(COPY) == 1.0
    np.testing.assert_allclose(game.ledger.remaining, [1, 0, 0, 1, 1])


def test_copy_of_operand_cannot_start_before_its_value_exists():
    inst = make(10, [5, 5, 2, 1, 1], [(4, False, 3, 0, None, (2, 3), 2.0, 1.0)])
    assert GameState(inst).options()[COPY].interval == (2, 3)
    inst = make(10, [5, 5, 2, 1, 1], [(4, False, 3, 0, None, (3, 3), 2.0, 1.0)])
    assert GameState(inst).options()[COPY] is None


def test_copy_of_output_ends_at_earliest_step_covering_demand():
    inst = make(10, [1, 1, 1, 1, 1], [(4, True, 0, 0, None, (0, 4), 1.5, 1.0)])
    assert GameState(inst).options()[COPY].interval == (0, 2)


def test_copy_intervals_share_at_most_one_step():
    rows = [(2, True, 0, 0, None, (0, 1), 2.0, 1.0),     # evicts over steps 1..2
            (2, False, 3, 1, None, (0, 3), 2.0, 1.0)]    # would prefetch over steps 1..2
    game = GameState(make(10, [1, 1, 1, 1, 1], rows))
    game.step(COPY)
    assert game.options()[COPY] is None
    assert game.legal().tolist() == [False, False, True]
    # with more supply the eviction uses only step 1 and the prefetch only step 2
    game = GameState(make(10, [2, 2, 2, 2, 2], rows))
    game.step(COPY)
    assert game.options()[COPY].interval == (2, 3)


def test_lowest_fitting_offset():
    rows = [(4, False, 2, 0, None, (0, 2), 0.0, 1.0),
            (3, False, 2, 1, None, (0, 2), 0.0, 1.0),
            (3, False, 2, 2, None, (0, 2), 0.0, 1.0),
            (1, False, 2, 3, None, (0, 2), 0.0, 1.0)]
    game = GameState(make(10, [1, 1, 1], rows))
    offsets = []
    for _ in rows:
        offsets.append(game.options()[COPY].offset if game.options()[COPY] else None)
        game.step(COPY if game.options()[COPY] else DROP)
    assert offsets == [0, 4, 7, None]


def test_nocopy_extends_the_tensor_and_needs_a_previous_allocation():
    rows = [(4, True, 0, 0, None, (0, 4), 1.0, 1.0),
            (4, False, 4, 0, None, (0, 4), 1.0, 2.0),
            (4, False, 4, 5, None, (0, 4), 1.0, 2.0)]
    game = GameState(make(10, [1, 1, 1, 1, 1], rows))
    assert game.options()[COPY].interval == (0, 1)
    game.step(COPY)
    assert game.options()[NOCOPY].interval == (2, 4)
    game.step(NOCOPY)
    assert game.options()[NOCOPY] is None          # tensor 5 was never allocated


def test_nocopy_reuses_a_covering_allocation():
    rows = [(4, True, 0, 0, None, (0, 3), 1.0, 1.0),
            (4, False, 3, 0, None, (0, 3), 1.0, 2.0)]
    game = GameState(make(10, [1, 1, 1, 1], rows))
    assert game.options()[NOCOPY].interval == (0, 3)   # the output stays for its live range
    game.step(NOCOPY)
    reuse = game.options()[NOCOPY]
    assert reuse.interval is None and reuse.offset == 0
    game.step(NOCOPY)
    assert game.total == 3.0
    validate(game.inst, game.solution())


def test_alias_group_shares_offset_and_decision():
    rows = [(3, False, 1, 0, 7, (0, 1), 0.0, 1.0),
            (2, False, 2, 1, None, (0, 2), 1.0, 1.0),
            (3, True, 2, 2, 7, (2, 3), 0.0, 1.0)]
    game = GameState(make(10, [1, 1, 1, 1], rows))
    game.step(COPY)                        # the group takes offset 0 during step 1
    game.step(COPY)                        # prefetched over step 1, so above the group
    assert game.history[-1].placement.offset == 3
    assert game.legal().tolist() == [True, True, False]   # Drop would split the group
    assert game.options()[COPY].offset == 0
    game = GameState(make(10, [1, 1, 1, 1], rows))
    game.step(DROP)
    game.step(COPY)
    assert game.legal().tolist() == [False, False, True]


def test_infeasible_state_ends_the_game_with_zero_return():
    rows = [(6, False, 1, 0, 7, (0, 1), 0.0, 1.0),
            (6, False, 2, 1, None, (2, 2), 0.0, 5.0),
            (6, True, 2, 2, 7, (2, 3), 0.0, 1.0)]
    game = GameState(make(10, [1, 1, 1, 1], rows))
    game.step(COPY)
    assert not game.can_drop_rest()
    reward = game.step(COPY)               # now buffer 2 can neither drop nor fit at offset 0
    assert game.lost and game.done
    assert game.total == 0.0 and reward == 5.0 - 6.0


def test_illegal_action_loses():
    game = GameState(make(10, [1, 1], [(4, False, 1, 0, None, (0, 1), 0.0, 1.0),
                                       (4, False, 1, 1, None, (0, 1), 0.0, 2.0)]))
    game.step(COPY)
    assert game.step(NOCOPY) == -1.0 and game.lost


def test_latency_tables_update_benefits():
    rows = [(2, False, 1, 0, None, (0, 1), 0.0, 99.0),
            (2, False, 1, 1, None, (0, 1), 0.0, 99.0)]
    table = LatencyTable(1, (0, 1), (10.0, 7.0, 6.0, 5.0))
    game = GameState(make(10, [1, 1], rows, (table,)))
    assert game.step(COPY) == 3.0
    assert game.step(COPY) == 2.0          # L({b0}) - L({b0, b1})
    game = GameState(make(10, [1, 1], rows, (table,)))
    game.step(DROP)
    assert game.step(COPY) == 4.0          # L({}) - L({b1})
    validate(game.inst, game.solution())


def test_undo_restores_the_exact_state():
    inst = random_instance(11, steps=40)
    rng = np.random.default_rng(0)
    game = GameState(inst)
    trail = []
    while not game.done:
        trail.append((game.index, game.total, game.reserved, game.legal().tolist(),
                      game.ledger.remaining.copy()))
        game.step(int(rng.choice(np.flatnonzero(game.legal()))))
    while trail:
        index, total, reserved, legal, remaining = trail.pop()
        game.undo() if game.lost else None
        if game.index > index:
            game.undo()
        assert game.index == index and game.total == pytest.approx(total)
        assert game.reserved == reserved
        assert game.legal().tolist() == legal
        np.testing.assert_allclose(game.ledger.remaining, remaining)
    assert not game.memory.rects and not game.ledger.pairs.any()


def test_reserved_counts_the_bytes_x_steps_of_every_fast_memory_interval():
    inst = random_instance(12, steps=40)
    rng = np.random.default_rng(1)
    ep = Episode(inst)
    ep.play(lambda: int(rng.choice(np.flatnonzero(ep.legal()))))
    game = ep.game
    total = sum(b.size * (d.interval[1] - d.interval[0] + 1)
                for b, d in zip(inst.buffers, game.solution().decisions) if d.interval is not None)
    assert total > 0 and game.reserved == total


def test_step_is_well_under_a_millisecond_on_16k_buffers():
    inst = random_instance(1, steps=5500, capacity=4096, alias_rate=0.0)
    assert len(inst.buffers) > 15_000
    game, rng = GameState(inst), np.random.default_rng(0)
    start = time.perf_counter()
    while not game.done:
        game.step(int(rng.choice(np.flatnonzero(game.legal()))))
    per_step = (time.perf_counter() - start) / len(inst.buffers)
    assert not game.lost
    assert per_step < 5e-4
    validate(inst, game.solution())
