"""MMap-MuZero: categorical targets, learning on a fixed batch, Drop-backup, end-to-end self-play."""
from __future__ import annotations

import numpy as np
import pytest
from memplan_instances import random_instance

from tempo.memplan.agents.episode import Episode
from tempo.memplan.agents.muzero import MuZeroConfig, solve
from tempo.memplan.game import COPY
from tempo.memplan.validate import validate


def _random_batch(rng: np.random.Generator, n: int, k: int, scale: float) -> dict:
    """A training batch of ``n`` random observations and ``k``-step targets (rewards and values up
    to ``scale``) with no sibling rewards known."""
    import jax.numpy as jnp

    from tempo.memplan.features import SHAPES

    return {"obs": {name: jnp.asarray(rng.random((n, *shape), np.float32))
                    for name, shape in SHAPES.items()},
            "actions": jnp.asarray(rng.integers(0, 3, (n, k))),
            "reward": jnp.asarray(rng.random((n, k)) * scale),
            "policy": jnp.asarray(rng.dirichlet(np.ones(3), (n, k + 1))),
            "value": jnp.asarray(rng.random((n, k + 1)) * scale),
            "mask": jnp.ones((n, k + 1)),
            "siblings": jnp.full((n, 3), jnp.nan)}


def test_two_hot_and_h_transform_round_trip():
    nets = pytest.importorskip("tempo.memplan.agents.muzero_nets")
    import jax.numpy as jnp

    x = jnp.array([0.0, 0.7, 3.0, 42.0, -5.0, 150.0])
    np.testing.assert_allclose(nets.h_inverse(nets.h_transform(x)), x, rtol=1e-4, atol=1e-4)
    target = nets.two_hot(x)
    np.testing.assert_allclose(target.sum(-1), 1.0, rtol=1e-6)
    # the expectation of a two-hot target, read back through the support, is the scalar
    logits = jnp.log(target + 1e-12)
    np.testing.assert_allclose(nets.to_scalar(logits), x, rtol=1e-3, atol=1e-3)


def test_drop_backup_rewinds_and_forces_the_stuck_group_to_drop():
    inst = random_instance(4, steps=40, alias_rate=0.5)
    ep = Episode(inst)
    rewinds = 0
    while not ep.game.done:
        legal = ep.legal()
        ep.game.step(COPY if legal[COPY] else int(np.flatnonzero(legal)[0]))
        if ep.after_move():
            rewinds += 1
            assert ep.game.index == ep.backup and ep.game.can_drop_rest()
    assert rewinds > 0 and ep.forced
    assert not ep.game.lost
    validate(inst, ep.game.solution())
    for b, d in zip(inst.buffers, ep.game.solution().decisions):
        if b.alias_id in ep.forced:
            assert d.action == "drop"


def test_finish_from_backup_completes_any_partial_game():
    inst = random_instance(6, steps=40, alias_rate=0.5)
    ep = Episode(inst)
    for _ in range(len(inst.buffers) // 2):
        legal = ep.legal()
        ep.game.step(COPY if legal[COPY] else int(np.flatnonzero(legal)[0]))
        ep.after_move()
    ep.finish_from_backup()
    assert ep.game.done and not ep.game.lost
    validate(inst, ep.game.solution())


@pytest.mark.slow
@pytest.mark.parametrize("simulations", [8, 0])
def test_self_play_returns_a_valid_solution(simulations):
    inst = random_instance(7, steps=30)
    result = solve(inst, 40.0, 0, MuZeroConfig(parallel=4, num_simulations=simulations))
    validate(inst, result.solution)
    assert result.episodes >= 4 and result.solution.reward > 0


@pytest.mark.slow
def test_training_lowers_the_loss_on_a_fixed_batch():
    import jax.numpy as jnp

    from tempo.memplan.agents import muzero_nets as nets

    rng = np.random.default_rng(0)
    batch = _random_batch(rng, 16, 3, scale=10.0)
    batch["siblings"] = jnp.asarray(np.where(rng.random((16, 3)) < 0.5, np.nan, 2.0), jnp.float32)
    params = nets.init_params(0)
    opt = nets.adam_init(params)
    first = float(nets.loss(params, batch))
    for _ in range(30):
        params, opt, _ = nets.train_step(params, opt, batch, 3e-3)
    assert float(nets.loss(params, batch)) < 0.7 * first


def test_reanalyse_refreshes_the_root_targets_of_its_share_of_the_batch():
    pytest.importorskip("mctx")
    from tempo.memplan.agents.base import Tracker
    from tempo.memplan.agents.muzero import MuZeroAgent, _observation

    inst = random_instance(3, steps=30)
    config = MuZeroConfig(parallel=2, td_steps=5, reanalyse=0.25, batch_size=8)
    agent = MuZeroAgent(inst, config, seed=0)
    for _ in range(10):  # a time budget: on a loaded machine one may not be enough
        agent.run(Tracker(inst, 3.0))
        booted = [p for p in agent.replay.items if p["boot"] is not None]
        if int(agent.opt["t"]) > 0 and len(booted) >= 8:
            break
    assert int(agent.opt["t"]) > 0  # the networks trained, so stale and fresh bootstraps differ
    assert len(booted) >= 8
    picks = booted[:8]
    fresh = agent._reanalyse(picks)
    assert all(a is b for a, b in zip(fresh[2:], picks[2:]))  # 25 % of 8: the first two are reanalysed
    for old, new in zip(picks[:2], fresh[:2]):
        np.testing.assert_allclose(new["policy"][0].sum(), 1.0, rtol=1e-5)
        assert np.all(new["policy"][0][~old["legal"]] == 0)  # illegal actions keep no mass
        np.testing.assert_array_equal(new["policy"][1:], old["policy"][1:])
        np.testing.assert_array_equal(new["value"][1:], old["value"][1:])
        _, _, value = agent.act([_observation(old["boot"][0])], old["boot"][1][None])
        expected = old["rewards0"] + config.discount ** config.td_steps * value[0]
        assert new["value"][0] == pytest.approx(expected, rel=1e-5, abs=1e-5)
        assert new["value"][0] != pytest.approx(old["value"][0], rel=1e-6)  # the stale bootstrap is gone


def test_demonstration_replays_the_heuristic_as_a_legal_game():
    from tempo.memplan.agents.demonstration import CLOSEST, Demonstrator
    from tempo.memplan.agents.heuristic import heuristic_solution
    from tempo.memplan.game import ACTION_NAMES

    inst = random_instance(5, steps=40, alias_rate=0.3)
    wanted = [ACTION_NAMES.index(d.action) for d in heuristic_solution(inst).decisions]
    demonstrator = Demonstrator(inst)
    ep = Episode(inst)
    ep.settle()
    while not ep.game.done:
        legal = ep.legal()
        action = demonstrator.action(ep.game.index, legal)
        assert legal[action]
        closest = CLOSEST[wanted[ep.game.index]]
        assert all(not legal[a] for a in closest[:closest.index(action)])
        ep.game.step(action)
        ep.after_move()
        ep.settle()
    assert not ep.game.lost
    validate(inst, ep.game.solution())


def test_returns_to_go_and_policy_target():
    from tempo.memplan.agents.demonstration import policy_target, returns_to_go

    np.testing.assert_allclose(returns_to_go([1.0, 2.0, 4.0], 0.5), [3.0, 4.0, 4.0])
    target = policy_target(1, np.array([True, True, False]))
    np.testing.assert_allclose(target, [0.05, 0.95, 0.0])


def test_demonstration_transitions_reach_the_replay_buffer_but_never_the_tracker():
    pytest.importorskip("mctx")
    from tempo.memplan.agents.base import Tracker
    from tempo.memplan.agents.muzero import MuZeroAgent

    inst = random_instance(3, steps=30)
    config = MuZeroConfig(parallel=2, td_steps=5, batch_size=8, demonstrations=True, demo_steps=5,
                          demo_share=1.0, reanalyse=0.5)
    agent = MuZeroAgent(inst, config, seed=0)
    tracker = Tracker(inst, 60.0)
    agent.demonstrate(tracker)
    demos = agent.replay.demos
    assert demos and all(p["demo"] for p in demos) and not agent.replay.items
    assert int(agent.opt["t"]) == 5  # trained on the demonstration alone
    assert tracker.episodes == 0 and tracker.best is None  # the demonstration game is not an answer
    assert all(p["legal"][p["actions"][0]] for p in demos)
    # Monte Carlo values: each state's target is its reward plus the discounted next target
    whole = [p for p in demos if p["mask"][1]]
    for p in whole[:5]:
        assert p["value"][0] == pytest.approx(p["reward"][0] + config.discount * p["value"][1],
                                              rel=1e-4, abs=1e-4)
    picks = agent.replay.sample(agent.rng, 8)
    assert all(p.get("demo") for p in picks)  # only demonstrations so far
    fresh = agent._reanalyse(picks)
    assert any(not np.array_equal(a["policy"][0], b["policy"][0]) for a, b in zip(fresh, picks))


def test_sampling_puts_demonstrations_first_so_reanalyse_refreshes_them():
    from tempo.memplan.agents.muzero import _Replay

    replay = _Replay(4)
    for i in range(4):
        replay.add({"i": i})
    replay.demos.extend({"i": 10 + i, "demo": True} for i in range(4))
    picks = replay.sample(np.random.default_rng(0), 50)
    flags = [p.get("demo", False) for p in picks]
    assert any(flags) and not all(flags)
    assert flags == sorted(flags, reverse=True)


@pytest.mark.slow
def test_self_play_with_demonstrations_returns_its_own_game():
    inst = random_instance(7, steps=30)
    result = solve(inst, 20.0, 0, MuZeroConfig(parallel=4, demonstrations=True))
    validate(inst, result.solution)
    assert result.episodes >= 4 and result.solution.reward > 0
    assert len(result.games) == result.episodes  # every answer is a self-play game


def test_training_reward_pays_the_memory_price_of_the_bytes_x_steps_a_move_holds():
    pytest.importorskip("mctx")
    from tempo.memplan.agents.muzero import MuZeroAgent
    from tempo.memplan.features import memory_price

    inst = random_instance(5, steps=30, capacity=24)
    agent = MuZeroAgent(inst, MuZeroConfig(parallel=1, memory_price=2.0), seed=0)
    assert agent.price == pytest.approx(2.0 * memory_price(inst)) and agent.price > 0
    ep = agent.episodes[0]
    ep.settle()
    held_moves = 0
    while not ep.game.done:
        legal = ep.legal()
        action = int(np.flatnonzero(legal)[0])
        total, held = ep.game.total, ep.game.reserved
        move, _ = agent._apply(ep, None, legal, action, np.full(3, 1 / 3), 0.0)
        spent = ep.game.reserved - held
        held_moves += spent > 0
        assert move.reward == pytest.approx((ep.game.total - total - agent.price * spent) / agent.scale)
        ep.settle()
    assert held_moves > 0


def test_lookahead_rewards_are_the_training_rewards_the_moves_get_when_played():
    """Each legal move's looked-ahead reward, found before the move, is the training reward
    ``_apply`` gives it when it is the move played; the move keeps the others' as reward targets."""
    pytest.importorskip("mctx")
    from tempo.memplan.agents.muzero import MuZeroAgent

    inst = random_instance(5, steps=30, capacity=24)
    agent = MuZeroAgent(inst, MuZeroConfig(parallel=1, memory_price=1.0, lookahead=True), seed=0)
    rng = np.random.default_rng(1)
    ep = agent.episodes[0]
    ep.settle()
    compared = 0
    while not ep.game.done:
        legal = ep.legal()
        looked = agent._lookahead(ep, legal)
        assert np.isnan(looked[~legal]).all()
        action = int(rng.choice(np.flatnonzero(legal)))
        move, rewound = agent._apply(ep, None, legal, action, np.full(3, 1 / 3), 0.0, looked)
        assert np.isnan(move.siblings[action])
        others = legal.copy()
        others[action] = False
        np.testing.assert_array_equal(move.siblings[others], looked[others])
        if not rewound:
            assert move.reward == pytest.approx(looked[action])
            compared += 1
        ep.settle()
    assert compared > 5


def test_search_takes_the_root_rewards_it_is_given():
    """With rewards given for the root's actions, the search prefers the one given the most,
    whatever the (untrained) reward network says; without them it follows the network."""
    pytest.importorskip("mctx")
    from tempo.memplan.agents.muzero import MuZeroAgent

    inst = random_instance(5, steps=30, capacity=24)
    agent = MuZeroAgent(inst, MuZeroConfig(parallel=1), seed=0)
    ep = agent.episodes[0]
    ep.settle()
    observation, legal = agent.observer(ep.game), np.ones((1, 3), bool)
    for best in range(3):
        given = np.zeros((1, 3), np.float32)
        given[0, best] = 50.0
        _, target, _ = agent.act([observation], legal, given)
        assert int(np.argmax(target[0])) == best
    unknown = np.full((1, 3), np.nan, np.float32)
    _, with_nan, _ = agent.act([observation], legal, unknown)
    _, without, _ = agent.act([observation], legal)
    np.testing.assert_allclose(with_nan, without, atol=0.2)


def test_root_rewards_of_moves_not_played_enter_the_loss_only_where_known():
    import jax.numpy as jnp

    from tempo.memplan.agents import muzero_nets as nets

    rng = np.random.default_rng(0)
    batch = _random_batch(rng, 8, 2, scale=1.0)
    params = nets.init_params(0)
    without = float(nets.loss(params, batch))
    assert np.isfinite(without)
    known = {**batch, "siblings": jnp.asarray(rng.random((8, 3)) * 5, jnp.float32)}
    assert float(nets.loss(params, known)) > without


def test_config_with_applies_literal_overrides_and_names_a_bad_item():
    from tempo.memplan.agents.muzero import config_with
    from tempo.memplan.problem import MemplanError

    config = config_with(["memory_price=1.0", "td_steps=1000", "demonstrations=True"])
    assert (config.memory_price, config.td_steps, config.demonstrations) == (1.0, 1000, True)
    assert config_with([]) == MuZeroConfig()
    with pytest.raises(MemplanError, match="'tdsteps=5'"):
        config_with(["tdsteps=5"])
    with pytest.raises(MemplanError, match="literal"):
        config_with(["td_steps=many"])


def test_probe_example_compares_the_model_with_the_game_on_a_small_program():
    import runpy
    from pathlib import Path

    pytest.importorskip("mctx")
    from tempo.memplan.agents.muzero import MuZeroAgent

    probe = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "memplan_muzero_probe.py"),
                           run_name="probe")["probe"]
    inst = random_instance(5, steps=30, capacity=24)
    row = probe(MuZeroAgent(inst, MuZeroConfig(parallel=1), seed=0), decisions=50)
    assert row["decisions"] > 5
    shares = [v for k, v in row.items() if "prefers" in k or "picks" in k]
    assert len(shares) == 5 and all(0.0 <= v <= 1.0 for v in shares)
    # at discount 0 a search given the game's root rewards ranks moves by them alone
    myopic = probe(MuZeroAgent(inst, MuZeroConfig(parallel=1, discount=0.0), seed=0), decisions=50)
    assert myopic["search picks the best one-move reward"] > 0.9
