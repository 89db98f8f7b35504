"""The rewriting environment (real gymnasium) and the PPO agent with the GNN encoder."""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from tempo.errors import TempoError
from tempo.superopt.agent import Agent, PPOConfig, Step, make_env, optimize_with_agent
from tempo.superopt.inference import best_of_k
from tempo.superopt.costmodel import CostModel
from tempo.superopt.env import (OP_NAMES, CostShapedReward, Feedback, LinearDecay, RewriteEnv, encode,
                               eq2_reward)
from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.models import build
from tempo.superopt.optimize import same_outputs
from tempo.superopt.rules import load_rules

RULES = load_rules()
TINY = PPOConfig(episodes_per_update=2, max_steps=4, epochs=1, hidden=16, gat_layers=2,
                 max_candidates=16)


def test_encoding_has_one_hot_ops_and_normalised_shape_edges():
    g = build("resnext", scale="small")
    obs = encode(g, scale=4096.0)
    assert obs.nodes.shape == (len(g.topo()), len(OP_NAMES))
    assert np.all(obs.nodes.sum(1) == 1)
    assert obs.edges.shape == (len(obs.edge_links), 4)
    assert obs.edges.max() == pytest.approx(64 / 4096)        # the largest dim is 64 channels
    assert obs.edge_links.max() < len(g.topo())


def test_eq2_reward_and_the_constant_between_measurements():
    g = build("resnext", scale="small")
    assert eq2_reward(Feedback(True, 8.0, 10.0, 20.0, g, g, g)) == pytest.approx(10.0)
    assert eq2_reward(Feedback(True, 12.0, 10.0, 20.0, g, g, g)) == pytest.approx(-10.0)
    assert eq2_reward(Feedback(False, 10.0, 10.0, 20.0, g, g, g)) == pytest.approx(0.01)


def test_env_masks_steps_and_measures_every_n_steps():
    env = RewriteEnv(build("bert", scale="small"), RULES, max_candidates=8, feedback_every=2,
                     max_steps=6, repeats=3)
    obs, info = env.reset(seed=0)
    assert env.observation_space["mask"].contains(obs["mask"])
    n = len(obs["candidates"])
    assert obs["mask"].sum() == n + 1 and 1 <= n <= 8
    assert env.observation_space["rules"].contains(obs["rules"])
    assert obs["rules"][0] == len(RULES) and np.all(obs["rules"][n + 1:] == len(RULES))
    assert [RULES[i].name for i in obs["rules"][1: n + 1]] == [c.rule.name for c in env.cands]
    _, r1, *_, i1 = env.step(1)
    _, r2, *_, i2 = env.step(1)
    assert not i1["measured"] and r1 == pytest.approx(0.01)
    assert i2["measured"] and len(i2["applied"]) == 2
    with pytest.raises(ValueError, match="masked out"):
        env.step(len(env.cands) + 1)
    *_, done, truncated, _ = env.step(0)
    assert done and not truncated


def test_roots_locate_each_rewrite_in_the_current_graph():
    g = build("squeezenet", scale="small")
    env = RewriteEnv(g, RULES, max_candidates=64, feedback_every=100, max_steps=4, repeats=2,
                     candidate_graphs=False)
    obs, _ = env.reset()
    assert obs["candidates"] == () and env.observation_space["roots"].contains(obs["roots"])
    order = g.topo()
    assert np.all(obs["roots"][0] == -1)                       # stop rewrites nothing
    for i, c in enumerate(env.cands, start=1):
        located = [order[j] for j in obs["roots"][i] if j >= 0]
        assert located == list(c.match.roots)
    assert np.all(obs["roots"][len(env.cands) + 1:] == -1)


def test_policy_gives_masked_actions_no_probability():
    agent = Agent(TINY, RULES)
    env = make_env(build("bert", scale="small"), RULES, TINY)
    obs, _ = env.reset()
    logits, values = agent.net([agent.state(obs)])
    n = int(obs["mask"].sum()) - 1
    assert n >= 1
    probs = torch.softmax(logits[0], -1)
    assert torch.all(probs[n + 1:] == 0) and probs[: n + 1].sum().item() == pytest.approx(1.0)
    assert values.shape == (1,)


def test_ppo_update_moves_the_policy_towards_rewarded_actions():
    agent = Agent(PPOConfig(hidden=16, gat_layers=2, max_candidates=8, lr=1e-2, epochs=8, seed=1), RULES)
    env = make_env(build("bert", scale="small"), RULES, agent.config)
    obs, _ = env.reset()
    state = agent.state(obs)
    before = torch.softmax(agent.net([state])[0][0], -1)[1].item()
    steps = [Step(state, 1, float(np.log(before)), 0.0, 1.0, True),
             Step(state, 0, float(np.log(torch.softmax(agent.net([state])[0][0], -1)[0].item())),
                  0.0, -1.0, True)]
    agent.update(steps)
    after = torch.softmax(agent.net([state])[0][0], -1)[1].item()
    assert after > before


def test_train_save_load_and_optimise(tmp_path):
    g = build("resnext", scale="small")
    path = str(tmp_path / "agent.pt")
    res = optimize_with_agent(g, RULES, budget_s=3, save=path, config=TINY, progress=False)
    assert same_outputs(g, res.graph)
    assert res.episodes >= TINY.episodes_per_update         # trained: one update at least
    loaded = Agent.load(path, RULES)
    for a, b in zip(loaded.net.state_dict().values(), Agent(TINY, RULES).net.state_dict().values()):
        assert a.shape == b.shape
    obs = make_env(g, RULES, TINY).reset()[0]
    saved = Agent(TINY, RULES)
    saved.net.load_state_dict(torch.load(path, weights_only=True)["state"])
    torch.testing.assert_close(loaded.net([loaded.state(obs)])[0], saved.net([saved.state(obs)])[0])
    with pytest.raises(TempoError, match="different rule set"):
        Agent.load(path, RULES[:-1])
    again = optimize_with_agent(build("resnext", scale="small", size=7), RULES, budget_s=1, load=path)
    assert again.cost > 0 and again.episodes == 0           # a loaded agent is not trained again


def test_best_of_k_returns_an_equivalent_graph_from_its_own_rollouts():
    g = build("squeezenet", scale="small")
    agent = Agent(TINY, RULES)
    env = make_env(g, RULES, TINY, inference=True)
    assert env.feedback_every > TINY.max_steps          # measured only when an episode ends
    idle = best_of_k(agent, env, budget_s=0.0)
    assert idle.rollouts == 1                           # no time: the greedy rollout, stopped at once
    assert idle.finalist.graph.key() == g.key()
    choice = best_of_k(agent, env, budget_s=3.0)
    chosen = choice.finalist
    assert choice.rollouts > 1                          # the greedy rollout and sampled ones
    assert choice.unpolished.origin in ("greedy rollout", "sampled rollout", "refined rollout")
    assert chosen is choice.unpolished or chosen.origin.startswith(f"{choice.unpolished.origin}, polished")
    assert choice.median_ms > 0 and len(chosen.applied) <= TINY.max_steps  # may stop at once
    assert same_outputs(g, chosen.graph)


def test_an_episode_never_offers_a_graph_it_has_visited():
    g = build("bert", scale="small")
    env = RewriteEnv(g, RULES, max_candidates=64, feedback_every=100, max_steps=10, repeats=2)
    env.reset()
    flip = next(i for i, c in enumerate(env.cands) if c.rule.name == "add_comm")
    env.step(flip + 1)
    assert env.applied == ["add_comm"]
    assert all(c.graph.key() != g.key() for c in env.cands)   # undoing add_comm is not offered
    assert any(c.rule.name == "add_comm" for c in env.cands)   # the other addition still is


def test_cost_shaping_sums_to_the_cost_models_improvement_over_an_episode():
    g = build("resnext", scale="small")
    model = CostModel(repeats=1)
    env = RewriteEnv(g, RULES, max_candidates=8, feedback_every=100, max_steps=5, repeats=1,
                     reward_fn=CostShapedReward(model, weight=2.0))
    env.reset(seed=0)
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(1)
        total += reward
        steps += 1
        done = terminated or truncated
    assert env.graph.key() != g.key() and steps >= 2
    modelled = 2.0 * (model.cost(g) - model.cost(env.graph)) / model.cost(g) * 100.0
    measured = (env.initial_ms - env.last_ms) / env.initial_ms * 100.0   # measured once, at the end
    assert total == pytest.approx(modelled + measured + 0.01 * (steps - 1))


def test_linear_decay_goes_from_initial_to_final_over_its_seconds_then_stays():
    now = time.perf_counter()
    assert LinearDecay(1.0, 0.2, 100.0, born=now)() == pytest.approx(1.0, abs=1e-3)
    assert LinearDecay(1.0, 0.2, 100.0, born=now - 50.0)() == pytest.approx(0.6, abs=1e-3)
    assert LinearDecay(1.0, 0.2, 100.0, born=now - 500.0)() == pytest.approx(0.2)
    assert LinearDecay(1.0, 0.0, 0.0)() == 0.0


def test_shaping_weight_is_read_at_every_step_when_it_is_a_callable():
    g = build("resnext", scale="small")
    weights = iter([0.0, 3.0])
    reward = CostShapedReward(CostModel(repeats=1), weight=lambda: next(weights))
    env = RewriteEnv(g, RULES, max_candidates=8, feedback_every=100, max_steps=5, repeats=1,
                     reward_fn=reward)
    env.reset(seed=0)
    assert env.step(1)[1] == pytest.approx(0.01)          # weight 0: Eq. 2's constant alone
    before = env.graph
    second = env.step(1)[1]
    gain = (reward.cost(before) - reward.cost(env.graph)) / reward.cost(g) * 100.0
    assert gain != 0.0 and second == pytest.approx(0.01 + 3.0 * gain)


def test_a_graph_the_cost_model_prices_at_nothing_gets_no_shaping():
    """Weight-only operators are constant-folded, so a graph of them costs 0 (as does a Tempo
    island of opaque steps): the shaping term is 0, not a division by zero."""
    b = GraphBuilder(0)
    g = b.build([node("transpose", b.weight((3, 4)), perm=(1, 0))])
    reward = CostShapedReward(CostModel(repeats=1), weight=2.0)
    assert reward.cost(g) == 0.0
    assert reward(Feedback(False, 1.0, 1.0, 1.0, g, g, g)) == pytest.approx(0.01)   # Eq. 2's constant


@pytest.mark.parametrize("field", ["shaping", "shaping_final"])
def test_negative_shaping_weights_are_refused(field):
    with pytest.raises(TempoError, match=field):
        PPOConfig(**{field: -0.5})


@pytest.mark.parametrize("options, field", [({"polish_share": -0.1}, "polish_share"),
                                            ({"refine_share": 0.8, "polish_share": 0.3}, "polish_share"),
                                            ({"polish_top_k": 0}, "polish_top_k")])
def test_inference_shares_and_polish_width_are_checked(options, field):
    with pytest.raises(TempoError, match=field):
        PPOConfig(**options)


def test_a_graph_is_measured_at_most_measurements_per_graph_times_then_its_median_is_reused():
    g = build("resnext", scale="small")
    env = RewriteEnv(g, RULES, max_candidates=8, feedback_every=1, max_steps=1, repeats=1,
                     measurements_per_graph=2)
    taken = []
    measure = env._measure
    env._measure = lambda graph: taken.append(measure(graph)) or taken[-1]
    latencies = []
    for _ in range(4):
        env.reset()
        latencies.append(env.step(1)[4]["latency_ms"])     # the same first candidate, every time
    assert len(taken) == 2
    assert latencies[:2] == [taken[0], float(np.median(taken))]
    assert latencies[2:] == [float(np.median(taken))] * 2
    env.reset()
    env.step(0)                                            # stop: the input, measured 3 times already
    assert len(taken) == 2


def test_measurements_per_graph_must_be_positive():
    with pytest.raises(TempoError, match="measurements_per_graph"):
        RewriteEnv(build("resnext", scale="small"), RULES, repeats=1, measurements_per_graph=0)
    with pytest.raises(TempoError, match="measurements_per_graph"):
        PPOConfig(measurements_per_graph=0)


def _bert_state(agent):
    obs, _ = make_env(build("bert", scale="small"), RULES, agent.config).reset()
    return agent.state(obs)


def test_self_imitation_keeps_the_best_episodes_with_their_returns_to_go():
    agent = Agent(replace(TINY, imitate_best=2, gamma=0.5), RULES)
    state = _bert_state(agent)
    for total in (1.0, 3.0, 2.0):
        agent._remember([Step(state, 1, 0.0, 0.0, total, False), Step(state, 0, 0.0, 0.0, 2.0, True)],
                        total)
    assert sorted(ep.total for ep in agent.best) == [2.0, 3.0]
    assert max(agent.best).to_go == [3.0 + 0.5 * 2.0, 2.0]


def test_self_imitation_raises_actions_that_beat_the_value_and_leaves_the_rest():
    agent = Agent(replace(TINY, imitate_best=1, lr=1e-2, seed=1), RULES)
    state = _bert_state(agent)

    def prob():
        with torch.no_grad():
            return torch.softmax(agent.net([state])[0][0], -1)[1].item()

    before = prob()
    agent._remember([Step(state, 1, 0.0, 0.0, -50.0, True)], -50.0)   # far below any value
    assert agent.imitate() == 0.0 and prob() == before
    agent.best = []
    agent._remember([Step(state, 1, 0.0, 0.0, 50.0, True)], 50.0)
    for _ in range(5):
        agent.imitate()
    assert prob() > before


def test_training_with_self_imitation_runs_and_fills_its_buffer():
    agent = Agent(replace(TINY, imitate_best=3), RULES)
    log = agent.train(make_env(build("resnext", scale="small"), RULES, agent.config), 2.0, progress=False)
    assert log.updates >= 1 and 1 <= len(agent.best) <= 3
    with pytest.raises(TempoError, match="imitate_best"):
        PPOConfig(imitate_best=-1)


def test_a_measured_graph_is_timed_side_by_side_with_the_last_measured_one(monkeypatch):
    from tempo.superopt import env as env_module
    from tempo.superopt.latency import Latency

    g = build("resnext", scale="small")
    env = RewriteEnv(g, RULES, max_candidates=8, feedback_every=1, max_steps=5, repeats=3)
    timed = []

    def twice_as_fast(graphs, rounds, repeats):        # "now" runs in half the time of "last"
        timed.append((graphs["last"].key(), graphs["now"].key(), rounds, repeats))
        return {"last": Latency((2.0, 4.0, 2.0)), "now": Latency((1.0, 2.0, 1.0))}

    monkeypatch.setattr(env_module, "time_interleaved", twice_as_fast)
    env.reset()
    first = env.step(1)
    assert timed == [(g.key(), env.graph.key(), 1, 3)]
    assert first[4]["latency_ms"] == pytest.approx(env.initial_ms / 2)
    assert first[1] == pytest.approx(50.0)                 # Eq. 2: (RT_0 - RT_0 / 2) / RT_0 * 100
    reached = env.graph
    second = env.step(1)
    assert timed[1][:2] == (reached.key(), env.graph.key())   # against the last measured graph
    assert second[4]["latency_ms"] == pytest.approx(env.initial_ms / 4)
    env.step(0)                                            # stop: the graph just measured
    assert len(timed) == 2


@pytest.mark.parametrize("budget", [0.0, 0.5, 3.0, 9.0])
def test_training_stops_within_one_step_of_its_budget(monkeypatch, budget):
    """On a clock that moves one second per environment step, training ends with the step under
    way at its budget; no cut-short episode is learned."""
    from tempo.superopt import agent as agent_module

    clock = [0.0]

    class StepClock:
        @staticmethod
        def perf_counter():
            return clock[0]

    monkeypatch.setattr(agent_module, "time", StepClock)
    env = make_env(build("resnext", scale="small"), RULES, TINY)
    real_step, lengths = env.step, [0]

    def step(action):
        clock[0] += 1.0
        out = real_step(action)
        lengths[-1] += 1
        if out[2] or out[3]:
            lengths.append(0)
        return out

    env.step = step
    log = Agent(TINY, RULES).train(env, budget, progress=False)
    assert clock[0] == math.ceil(budget)
    assert len(log.returns) == len(lengths) - 1         # the episodes that finished, no other
    assert (log.updates >= 1) == bool(log.returns)      # learned from those, if any
