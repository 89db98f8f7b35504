"""Inference with a trained RL agent: best of K rollouts, then policy-guided refinement.

:func:`best_of_k` spends its budget in two phases. First the policy's greedy
(arg-max) rollout and stochastic rollouts sampled from it. Then
:func:`refine` improves the best of them by a local search in the space of
the policy's own rollouts: it replays the incumbent's actions up to a random
step, takes there another action sampled from the policy (the incumbent's own
action excluded), lets the greedy policy finish the episode, and keeps the
new final graph when it is faster than the incumbent, timed interleaved with
it. A multi-step rewrite the policy has learned to finish (enlarge, merge,
drop the concat) is added where the sampled action starts it, and the
measurement of the *finished* rollout judges it, so rewrites that are
temporarily slower are not rejected half-way. Every graph considered was
reached by a rollout of the agent's policy from the input graph (and is
stored with the actions that reach it); nothing is seeded from another search.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tempo.superopt.env import RewriteEnv
from tempo.superopt.execute import time_interleaved
from tempo.superopt.graph import Graph


@dataclass
class Finalist:
    """One graph the agent's inference considered, and where it came from."""

    graph: Graph
    applied: list[str]
    origin: str                     # "greedy rollout", "sampled rollout", "refined rollout"
                                    # or "fast in training"
    screened_ms: float              # the end-of-episode measurement that ranked it
    actions: list[int]              # the actions that reach it from the input graph


def _finish(agent, env: RewriteEnv, obs: dict, done: bool, greedy: bool, origin: str,
            info: dict) -> Finalist:
    while not done:
        action, *_ = agent.act(obs, greedy)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return Finalist(env.graph, list(env.applied), origin, info["latency_ms"], list(env.actions))


def rollout(agent, env: RewriteEnv, greedy: bool) -> Finalist:
    """One episode of the policy from the input graph (measured when it ends)."""
    obs, info = env.reset()
    return _finish(agent, env, obs, False, greedy, "greedy rollout" if greedy else "sampled rollout",
                   info)


def branch(agent, env: RewriteEnv, actions: Sequence[int], at: int, rng: np.random.Generator,
           greedy: bool = True) -> Finalist | None:
    """Replay ``actions[:at]``, sample another action than ``actions[at]`` from the policy there,
    then finish the episode with the policy (arg-max when ``greedy``, else sampled). None when
    the policy allows no other action."""
    obs, info = env.reset()
    for a in actions[:at]:
        obs, _, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            raise ValueError(f"the episode ended before step {at}: not a replayable prefix")
    with torch.no_grad():
        logits, _ = agent.net([agent.state(obs)])
    probs = torch.softmax(logits[0].double(), -1).numpy()
    probs[actions[at]] = 0.0
    if probs.sum() < 1e-9:
        return None
    action = int(rng.choice(len(probs), p=probs / probs.sum()))
    obs, _, terminated, truncated, info = env.step(action)
    return _finish(agent, env, obs, terminated or truncated, greedy, "refined rollout", info)


def refine(agent, env: RewriteEnv, start: Finalist, deadline: float, seed: int = 0
           ) -> tuple[Finalist, list[Finalist], int]:
    """Hill-climb from ``start`` over branched rollouts of the policy until ``deadline``.

    Every other branch is finished by the greedy policy, the others by
    sampling it (a sharp policy finishes most greedy branches in graphs
    already judged). Each new final graph is timed against the incumbent in
    4 interleaved rounds and replaces it when its fastest run is faster (see
    :attr:`~tempo.superopt.latency.Latency.min_ms`). Returns the incumbent,
    every distinct graph reached and the number of branched rollouts.
    """
    rng = np.random.default_rng(seed)
    best, reached, tried, count = start, [], {start.graph.key()}, 0
    while time.perf_counter() < deadline and best.actions:
        found = branch(agent, env, best.actions, int(rng.integers(len(best.actions))), rng,
                       greedy=count % 2 == 0)
        count += 1
        if found is None or found.graph.key() in tried:
            continue
        tried.add(found.graph.key())
        reached.append(found)
        timed = time_interleaved({"best": best.graph, "new": found.graph}, rounds=4, repeats=8)
        if timed["new"].min_ms < timed["best"].min_ms:
            best = found
    return best, reached, count


def best_of_k(agent, env: RewriteEnv, budget_s: float, extra: Sequence[Finalist] = ()
              ) -> tuple[Finalist, float, int]:
    """The fastest graph of the policy's rollouts within ``budget_s`` (see the module doc).

    ``1 - config.refine_share`` of the budget goes to the greedy rollout and
    sampled rollouts (at least ``config.min_samples``), the rest to
    :func:`refine`, started from the best of those and ``extra`` by their
    end-of-episode measurement. The refined incumbent and the best distinct
    other graphs (``config.finalists`` in all) go to :func:`final_choice`;
    the median decides there, the statistic ``optimize``'s never-slower check
    and the benchmark's verdict use (screening and training rank by the
    fastest run, which load disturbs least).
    Returns the winner, its re-timed median and the number of rollouts.
    """
    config = agent.config
    start = time.perf_counter()
    pool: dict[tuple, Finalist] = {}

    def add(f: Finalist) -> None:
        known = pool.get(f.graph.key())
        if known is None or f.screened_ms < known.screened_ms:
            pool[f.graph.key()] = f

    add(rollout(agent, env, greedy=True))
    rollouts = 1
    sampling_s = budget_s * (1.0 - config.refine_share)
    while rollouts <= config.min_samples or time.perf_counter() - start < sampling_s:
        add(rollout(agent, env, greedy=False))
        rollouts += 1
    for f in extra:
        add(f)
    first = min(pool.values(), key=lambda f: f.screened_ms)
    refined, reached, count = refine(agent, env, first, start + budget_s, config.seed)
    for f in reached:
        add(f)
    others = [f for f in sorted(pool.values(), key=lambda f: f.screened_ms)
              if f.graph.key() != refined.graph.key()]
    chosen, median = final_choice([refined, *others[: config.finalists - 1]], config.confirm)
    return chosen, median, rollouts + count


def final_choice(finalists: Sequence[Finalist], confirm: int) -> tuple[Finalist, float]:
    """The finalist with the lowest median latency, and that median.

    All are timed in 20 interleaved rounds; the ``confirm`` best of those are
    timed again in 60 fresh rounds, and those alone decide. Taking the lowest
    of eight noisy medians favours a graph that was lucky in that sample (with
    differences of ~1% and IQRs of 10-20%, often a slower one); fresh
    measurements of the few best are free of that selection bias.
    """
    screen = time_interleaved({str(i): f.graph for i, f in enumerate(finalists)}, rounds=20)
    best = sorted(range(len(finalists)), key=lambda i: screen[str(i)].median_ms)[:confirm]
    if len(best) == 1:
        return finalists[best[0]], screen[str(best[0])].median_ms
    timed = time_interleaved({str(i): finalists[i].graph for i in best}, rounds=60)
    winner = min(best, key=lambda i: timed[str(i)].median_ms)
    return finalists[winner], timed[str(winner)].median_ms
