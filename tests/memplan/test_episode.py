"""Episodes: automatic moves are exactly the forced and the free ones; agents decide the rest."""
from __future__ import annotations

import numpy as np
import pytest
from memplan_instances import random_instance

from tempo.memplan.agents.episode import Episode
from tempo.memplan.game import COPY, DROP, NOCOPY, GameState
from tempo.memplan.validate import validate


def _is_decision(ep: Episode) -> bool:
    legal = ep.legal()
    reuse = ep.game.options()[NOCOPY]
    free = legal[NOCOPY] and reuse.interval is None and ep.game.current.alias_id is None
    return legal.sum() > 1 and not free


def test_advance_stops_exactly_at_decision_points_and_completes_valid_games():
    for seed in range(4):
        inst = random_instance(seed, steps=40, alias_rate=0.4)
        ep = Episode(inst)
        rng = np.random.default_rng(seed)
        decisions = 0
        ep.settle()
        while not ep.game.done:
            assert _is_decision(ep)
            decisions += 1
            ep.game.step(int(rng.choice(np.flatnonzero(ep.legal()))))
            ep.after_move()
            ep.settle()
        assert not ep.game.lost and 0 < decisions < len(inst.buffers)
        validate(inst, ep.game.solution())


def test_settle_plays_the_same_game_as_taking_automatic_moves_one_by_one():
    """Greedy play (Copy, else NoCopy, else Drop) through settle() equals the move-by-move game."""
    inst = random_instance(3, steps=40, alias_rate=0.3)

    def greedy(ep: Episode) -> int:
        legal = ep.legal()
        return COPY if legal[COPY] else NOCOPY if legal[NOCOPY] else DROP

    by_hand, auto = Episode(inst), Episode(inst)
    while not by_hand.game.done:
        automatic = by_hand.automatic()
        by_hand.game.step(greedy(by_hand) if automatic is None else automatic)
        by_hand.after_move()
    auto.settle()
    while not auto.game.done:
        auto.game.step(greedy(auto))
        auto.after_move()
        auto.settle()
    assert auto.game.total == by_hand.game.total
    assert auto.game.solution() == by_hand.game.solution()


def test_drop_rest_equals_dropping_move_by_move_and_undoes():
    inst = random_instance(4, steps=40, alias_rate=0.4)
    rng = np.random.default_rng(1)
    ep = Episode(inst)
    while not ep.game.can_drop_rest() or ep.game.index < len(inst.buffers) // 2:
        ep.game.step(int(rng.choice(np.flatnonzero(ep.legal()))))
        ep.after_move()
    fast, half, total = ep.game, ep.game.index, ep.game.total
    slow = GameState(inst)
    for step in fast.history:
        slow.step(step.action)
    fast.drop_rest()
    while not slow.done:
        slow.step(DROP)
    assert fast.done and not slow.lost and fast.solution() == slow.solution()
    validate(inst, fast.solution())
    fast.rewind(half)
    slow.rewind(half)
    assert fast.index == half and fast.total == total and fast.alias == slow.alias
    fast.rewind(0)
    assert not fast.memory.rects and not fast.alias and fast.open_groups == 0


def test_lookahead_reports_a_move_and_its_automatic_moves_then_takes_them_back():
    """What lookahead(a) reports is what playing a (and the automatic moves up to the next decision)
    does to a replica of the game; the game itself is left as it was."""
    inst = random_instance(2, steps=40, capacity=24, alias_rate=0.4)
    rng = np.random.default_rng(0)
    ep = Episode(inst)
    ep.settle()
    checked = lost = 0
    while not ep.game.done:
        game = ep.game
        before = (game.index, game.total, game.reserved, len(game.history), game.legal().tolist())
        for action in np.flatnonzero(ep.legal()):
            gained = ep.lookahead(int(action))
            assert (game.index, game.total, game.reserved, len(game.history),
                    game.legal().tolist()) == before
            replica = Episode(inst)
            replica.forced = set(ep.forced)
            for step in game.history:
                replica.game.step(step.action)
            total, reserved = replica.game.total, replica.game.reserved
            replica.game.step(int(action))
            if replica.game.lost or replica.advance():
                assert gained is None
                lost += 1
            else:
                assert gained == pytest.approx((replica.game.total - total,
                                                replica.game.reserved - reserved))
            checked += 1
        ep.game.step(int(rng.choice(np.flatnonzero(ep.legal()))))
        ep.after_move()
        ep.settle()
    assert checked > 20 and lost > 0
