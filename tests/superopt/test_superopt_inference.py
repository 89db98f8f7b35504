"""Inference of the RL agent: replayable rollouts, branching and refinement stay the policy's own."""
from __future__ import annotations

import time

import numpy as np

from tempo.superopt.agent import Agent, PPOConfig, make_env
from tempo.superopt.inference import (Finalist, _location, branch, extensions, final_choice,
                                      omissions, polish, refine, rollout)
from tempo.superopt.models import build
from tempo.superopt.optimize import same_outputs
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import load_rules

RULES = load_rules()
SMALL = PPOConfig(max_steps=12, hidden=16, gat_layers=2, max_candidates=64, seed=3)


def _replay(env, actions):
    env.reset()
    for a in actions:
        env.step(a)
    return env.graph


def _assert_reached_by_its_actions(env, g, f: Finalist):
    """``f`` is what its recorded actions reach from ``g``, and computes what ``g`` computes."""
    assert _replay(env, f.actions).key() == f.graph.key()
    assert same_outputs(g, f.graph)


def test_recorded_actions_replay_to_the_measured_graph():
    g = build("inception", scale="small")
    agent = Agent(SMALL, RULES)
    train_env = make_env(g, RULES, SMALL)
    for _ in range(3):
        rollout(agent, train_env, greedy=False)
    fresh = make_env(g, RULES, SMALL, inference=True)     # another env of the same graph
    for m in train_env.fastest(5):
        assert _replay(fresh, m.actions).key() == m.graph.key()
        assert fresh.applied == m.applied


def test_a_branch_shares_the_prefix_and_differs_at_the_branch_step():
    g = build("squeezenet", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    first = rollout(agent, env, greedy=False)
    while len(first.actions) < 3:
        first = rollout(agent, env, greedy=False)
    rng = np.random.default_rng(0)
    for at in range(len(first.actions)):
        b = branch(agent, env, first.actions, at, rng)
        assert b is not None and b.origin == "refined rollout"
        assert b.actions[:at] == first.actions[:at] and b.actions[at] != first.actions[at]
        _assert_reached_by_its_actions(env, g, b)


def test_refine_keeps_a_rollout_of_the_policy_and_never_the_unmeasured():
    g = build("resnext", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = rollout(agent, env, greedy=True)
    if not start.actions:                     # untrained policy may stop at once; any rollout will do
        start = rollout(agent, env, greedy=False)
    best, reached, count = refine(agent, env, start, time.perf_counter() + 3.0, seed=1)
    assert count >= 1 and len(reached) <= count
    assert best is start or any(best is f for f in reached)
    _assert_reached_by_its_actions(env, g, best)
    assert len({f.graph.key() for f in reached}) == len(reached)   # each distinct graph judged once


def test_final_choice_takes_the_faster_graph_on_fresh_measurements():
    g = build("resnext", scale="small")
    finalists = [Finalist(g, [], "greedy rollout", 1.0, [])]
    found = [c for c in candidates(g, RULES) if c.rule.name.startswith("enlarge")]
    assert found, "resnext has a 1x1 convolution to enlarge"
    finalists.append(Finalist(found[0].graph, [found[0].rule.name], "sampled rollout", 0.5, [1]))
    chosen, median = final_choice(finalists, confirm=2)
    assert chosen is finalists[0] and median > 0


def test_every_inference_decision_takes_several_compiles_of_each_graph(monkeypatch):
    from tempo.superopt import inference
    from tempo.superopt.execute import DECISION_COMPILES

    timed = []
    real = inference.time_interleaved

    def recording(graphs, rounds=5, repeats=10, compiles=1, deadline=None):
        timed.append(compiles)
        return real(graphs, rounds, repeats, compiles=compiles, deadline=deadline)

    monkeypatch.setattr(inference, "time_interleaved", recording)
    g = build("resnext", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = _some_rollout(agent, env)
    refine(agent, env, start, time.perf_counter() + 0.5, seed=1)
    polish(agent, env, start, time.perf_counter() + 0.5, top_k=2, rounds=4)
    found = next(c for c in candidates(g, RULES) if c.rule.name.startswith("enlarge"))
    final_choice([start, Finalist(found.graph, [found.rule.name], "sampled rollout", 0.5, [1])], 2)
    assert timed and set(timed) == {DECISION_COMPILES} and DECISION_COMPILES > 1


def _some_rollout(agent, env):
    start = rollout(agent, env, greedy=True)
    while len(start.actions) < 2:             # untrained policy may stop at once; any rollout will do
        start = rollout(agent, env, greedy=False)
    return start


def test_extensions_take_one_more_policy_move_from_the_chosen_graph():
    g = build("squeezenet", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = _some_rollout(agent, env)
    path = start.actions[:-1] if start.actions[-1] == 0 else start.actions
    found = list(extensions(agent, env, start, top_k=3))
    if len(path) == SMALL.max_steps:          # cut off: no move is left to take
        assert found == []
        return
    assert found and all(f.graph.key() != start.graph.key() for f in found)
    assert len({f.graph.key() for f in found}) == len(found)
    assert len({f.actions[len(path)] for f in found}) <= 3          # at most top_k first moves
    for f in found:
        assert f.actions[:len(path)] == path and f.actions[len(path)] != 0
        _assert_reached_by_its_actions(env, g, f)


def test_omissions_leave_out_one_rewrite_and_what_needed_it():
    g = build("squeezenet", scale="small")
    env = make_env(g, RULES, SMALL, inference=True)
    env.reset()
    first = env.cands[0]
    here = {_location(c): c for c in env.cands}
    env.step(1)
    after = {_location(c): i for i, c in enumerate(env.cands, 1)}
    independent = next(loc for loc in after if loc in here and here[loc].graph.key() != first.graph.key())
    dependent = next(loc for loc in after if loc not in here)
    for second, alone in ((independent, here[independent].graph), (dependent, g)):
        env.reset()
        env.step(1)
        env.step(after[second])
        env.step(0)
        start = Finalist(env.graph, list(env.applied), "greedy rollout", 1.0, list(env.actions))
        found = list(omissions(env, start))
        assert {f.graph.key() for f in found} == {alone.key(), first.graph.key()}
        for f in found:
            assert f.origin == "pruned"
            _assert_reached_by_its_actions(env, g, f)


def test_polish_keeps_the_start_or_a_neighbour_it_confirmed():
    g = build("resnext", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = _some_rollout(agent, env)
    best, gains = polish(agent, env, start, time.perf_counter() + 2.0, top_k=4, rounds=10)
    assert all(ratio > 1.0 for ratio in gains)
    if gains:
        assert best.origin.startswith(f"{start.origin}, polished x{len(gains)}")
    else:
        assert best is start
    _assert_reached_by_its_actions(env, g, best)


def test_polish_past_its_deadline_times_nothing(monkeypatch):
    from tempo.superopt import inference

    screened = []
    monkeypatch.setattr(inference, "_confirmed",
                        lambda best, proposals, *_: screened.append(len(proposals)))
    g = build("squeezenet", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = _some_rollout(agent, env)
    best, gains = polish(agent, env, start, deadline=time.perf_counter(), top_k=4)
    assert screened == [] and best is start and gains == []
    everything = list(extensions(agent, env, start, 4)) + list(omissions(env, start))
    assert everything                 # so the deadline, not a lack of proposals, ended polishing


def test_polish_times_a_graph_reached_twice_in_one_pass_once(monkeypatch):
    from tempo.superopt import inference

    screened = []
    monkeypatch.setattr(inference, "_confirmed",
                        lambda best, proposals, *_: screened.append(proposals))
    g = build("squeezenet", scale="small")
    agent = Agent(SMALL, RULES)
    env = make_env(g, RULES, SMALL, inference=True)
    start = _some_rollout(agent, env)
    reached = list(extensions(agent, env, start, 4)) + list(omissions(env, start))
    assert len(reached) > 1
    monkeypatch.setattr(inference, "extensions", lambda *_: iter(reached))
    monkeypatch.setattr(inference, "omissions", lambda *_: iter(reached[::-1]))
    polish(agent, env, start, deadline=time.perf_counter() + 60, top_k=4)
    keys = [f.graph.key() for f in screened[0]]
    assert len(keys) == len(set(keys)) and set(keys) == {f.graph.key() for f in reached}
