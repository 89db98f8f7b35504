"""Inference with a trained RL agent: best of K rollouts, policy-guided refinement, polishing.

:func:`best_of_k` spends its budget in three phases. First the policy's greedy
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
reached from the input graph by the agent's own rewrites (and is stored with
the actions that reach it); nothing is seeded from another search.
Last, :func:`polish` moves the chosen graph one rewrite at a time: one more
where the policy points (its most likely rewrites there, each taken alone and
finished by the policy), or one fewer (the chosen path replayed with one of its
rewrites left out, which undoes a rewrite that is slower on its own, such as
a merge of two matmuls). These are timed against the chosen graph, and one is
kept only when a fresh paired verdict (:mod:`tempo.superopt.stats`) says it is
faster. The refinement's
quick comparisons accept an equally fast graph about as often as not, so a
rollout that stops one rewrite short can win there; the verdict does not take
a graph on a coin toss.

Every phase keeps to its deadline: no rollout or proposal starts past it, and
every timing runs the rounds that fit (one at least,
:func:`~tempo.superopt.execute.time_calls`).
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from tempo.superopt.env import RewriteEnv
from tempo.superopt.execute import DECISION_COMPILES, time_interleaved, timed_rounds
from tempo.superopt.graph import Graph, Node
from tempo.superopt.rewrite import Candidate
from tempo.superopt.stats import paired_speedup, paired_verdict


@dataclass
class Finalist:
    """One graph the agent's inference considered, and where it came from."""

    graph: Graph
    applied: list[str]
    origin: str                     # "greedy rollout", "sampled rollout", "refined rollout"
                                    # or "fast in training"
    screened_ms: float              # the end-of-episode measurement that ranked it
    actions: list[int]              # the actions that reach it from the input graph


@dataclass
class Choice:
    """What :func:`best_of_k` chose: the polished graph, its estimated median latency, the
    rollouts taken, and the graph as the final choice left it (before polishing)."""

    finalist: Finalist
    median_ms: float
    rollouts: int
    unpolished: Finalist


def _finish(agent, env: RewriteEnv, obs: dict, done: bool, greedy: bool, origin: str,
            info: dict, deadline: float | None = None) -> Finalist:
    """The episode played to its end by the policy; past ``deadline`` it stops where it is."""
    while not done:
        late = deadline is not None and time.perf_counter() >= deadline
        action = 0 if late else agent.act(obs, greedy)[0]
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return Finalist(env.graph, list(env.applied), origin, info["latency_ms"], list(env.actions))


def rollout(agent, env: RewriteEnv, greedy: bool, deadline: float | None = None) -> Finalist:
    """One episode of the policy from the input graph (measured when it ends), stopped where it
    is at ``deadline``."""
    obs, info = env.reset()
    return _finish(agent, env, obs, False, greedy, "greedy rollout" if greedy else "sampled rollout",
                   info, deadline)


def _replay(env: RewriteEnv, actions: Sequence[int]) -> tuple[dict, bool]:
    """Reset ``env`` and take ``actions``; the last observation and whether the episode ended."""
    obs, _ = env.reset()
    for a in actions:
        obs, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            return obs, True
    return obs, False


def _logits(agent, obs: dict) -> torch.Tensor:
    with torch.no_grad():
        logits, _ = agent.net([agent.state(obs)])
    return logits[0]


def branch(agent, env: RewriteEnv, actions: Sequence[int], at: int, rng: np.random.Generator,
           greedy: bool = True, deadline: float | None = None) -> Finalist | None:
    """Replay ``actions[:at]``, sample another action than ``actions[at]`` from the policy there,
    then finish the episode with the policy (arg-max when ``greedy``, else sampled; stopped
    where it is at ``deadline``). None when the policy allows no other action."""
    obs, done = _replay(env, actions[:at])
    if done:
        raise ValueError(f"the episode ended before step {at}: not a replayable prefix")
    probs = torch.softmax(_logits(agent, obs).double(), -1).numpy()
    probs[actions[at]] = 0.0
    if probs.sum() < 1e-9:
        return None
    action = int(rng.choice(len(probs), p=probs / probs.sum()))
    obs, _, terminated, truncated, info = env.step(action)
    return _finish(agent, env, obs, terminated or truncated, greedy, "refined rollout", info,
                   deadline)


def refine(agent, env: RewriteEnv, start: Finalist, deadline: float, seed: int = 0
           ) -> tuple[Finalist, list[Finalist], int]:
    """Hill-climb from ``start`` over branched rollouts of the policy until ``deadline``.

    Every other branch is finished by the greedy policy, the others by
    sampling it (a sharp policy finishes most greedy branches in graphs
    already judged). Each new final graph is timed against the incumbent in
    up to 4 interleaved rounds (fewer where ``deadline`` comes first), each
    round on another compile of both graphs, and replaces it when the median
    of the rounds' cycle-paired ratios says it is faster
    (:func:`~tempo.superopt.stats.paired_speedup`). Returns the incumbent,
    every distinct graph reached and the number of branched rollouts.
    """
    rng = np.random.default_rng(seed)
    best, reached, tried, count = start, [], {start.graph.key()}, 0
    while time.perf_counter() < deadline and best.actions:
        found = branch(agent, env, best.actions, int(rng.integers(len(best.actions))), rng,
                       greedy=count % 2 == 0, deadline=deadline)
        count += 1
        if found is None or found.graph.key() in tried:
            continue
        tried.add(found.graph.key())
        reached.append(found)
        timed = time_interleaved({"best": best.graph, "new": found.graph}, rounds=4, repeats=8,
                                 compiles=DECISION_COMPILES, deadline=deadline)
        if paired_speedup(timed["best"], timed["new"], timed_rounds(timed["best"], 8)) > 1.0:
            best = found
    return best, reached, count


def extensions(agent, env: RewriteEnv, start: Finalist, top_k: int) -> Iterator[Finalist]:
    """Graphs one policy move past ``start``, likeliest first: its ``top_k`` most likely rewrites
    at ``start``'s graph, each taken alone (then stop) and finished by the greedy policy. Yields
    nothing when ``start``'s episode was cut off (no move is left to take)."""
    path = start.actions[:-1] if start.actions and start.actions[-1] == 0 else start.actions
    obs, done = _replay(env, path)
    if done:
        return
    order = torch.argsort(_logits(agent, obs), descending=True).tolist()
    moves = [a for a in order if a != 0 and obs["mask"][a]][:top_k]
    seen = {start.graph.key()}
    for move in moves:
        for finish in (False, True):
            _replay(env, path)
            obs, _, terminated, truncated, info = env.step(move)
            done = terminated or truncated
            if not finish and not done:
                obs, _, terminated, truncated, info = env.step(0)
            f = _finish(agent, env, obs, done or not finish, True, "polished", info)
            if f.graph.key() not in seen:
                seen.add(f.graph.key())
                yield f


def _near(n: Node, depth: int) -> object:
    """``n``'s structure up to ``depth`` levels up (weights and inputs by identity, nodes further
    up by op and shape): what a rewrite elsewhere in the graph leaves unchanged."""
    if not n.src:
        return n
    if depth == 0:
        return n.op, n.shape
    return n.op, n.attrs, n.shape, tuple(_near(s, depth - 1) for s in n.src)


def _location(c: Candidate, depth: int = 3) -> tuple:
    """Which rewrite ``c`` is, recognisable in another graph of the same lineage: its rule and
    the nearby structure of its roots and of every node it binds."""
    bound = tuple((k, _near(v, depth) if isinstance(v, Node) else v)
                  for k, v in sorted(c.match.env.items(), key=lambda kv: kv[0]))
    return c.rule.name, tuple(_near(r, depth) for r in c.match.roots), bound


def omissions(env: RewriteEnv, start: Finalist) -> Iterator[Finalist]:
    """Graphs one rewrite short of ``start``: its rewrites replayed, in order, with one left out
    (the first left out first).

    A later rewrite is found again by :func:`_location` (rule and nearby
    structure); one that no longer applies without the left-out rewrite (it
    rewrote that rewrite's output) is left out too. Each graph is stored with
    the actions that reach it, so polishing can extend it further. Where the
    policy took a rewrite that is slower on its own (merging two matmuls that
    run faster apart), no extension can undo it; leaving it out can.
    """
    path = start.actions[:-1] if start.actions and start.actions[-1] == 0 else start.actions
    env.reset()
    locations = []
    for a in path:
        locations.append(_location(env.cands[a - 1]))
        env.step(a)
    seen = {start.graph.key()}
    for left_out in range(len(locations)):
        env.reset()
        done, info = False, {}
        for loc in locations[:left_out] + locations[left_out + 1:]:
            action = next((i for i, c in enumerate(env.cands, 1) if _location(c) == loc), None)
            if action is not None:
                _, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    done = True
                    break
        if not done:
            _, _, _, _, info = env.step(0)
        if env.graph.key() not in seen:
            seen.add(env.graph.key())
            yield Finalist(env.graph, list(env.applied), "pruned", info["latency_ms"],
                           list(env.actions))


def _confirmed(best: Finalist, proposals: Sequence[Finalist], screen_rounds: int,
               rounds: int, deadline: float, tries: int = 2) -> tuple[Finalist, float] | None:
    """The first of the ``tries`` fastest ``proposals`` (screened with ``best``) that a fresh
    paired verdict over ``rounds`` rounds finds faster than ``best``, with its ratio. The
    verdict is per round: per compile pair, 8 values would leave only their range. The screen
    and each verdict take their share of the time to ``deadline`` (by their rounds' runs) and
    the rounds that fit in it."""
    now = time.perf_counter()
    screen_runs = screen_rounds * (len(proposals) + 1)
    screen_end = now + (deadline - now) * screen_runs / (screen_runs + 2 * tries * rounds)
    screen = time_interleaved({"best": best.graph, **{str(i): f.graph for i, f in
                                                      enumerate(proposals)}}, rounds=screen_rounds,
                              compiles=DECISION_COMPILES, deadline=screen_end)
    done = timed_rounds(screen["best"])
    speedup = {i: paired_speedup(screen["best"], screen[str(i)], done)
               for i in range(len(proposals))}
    ranked = sorted(speedup, key=speedup.get, reverse=True)[:tries]
    for n, i in enumerate(ranked):
        if speedup[i] <= 1.0:
            return None
        now = time.perf_counter()
        timed = time_interleaved({"best": best.graph, "new": proposals[i].graph}, rounds=rounds,
                                 compiles=DECISION_COMPILES,
                                 deadline=now + (deadline - now) / (len(ranked) - n))
        verdict = paired_verdict(timed["best"], timed["new"], timed_rounds(timed["best"]))
        if verdict.outcome == "win":
            return proposals[i], verdict.ratio
    return None


def _unseen(source: Iterator[Finalist], seen: set) -> Iterator[Finalist]:
    """The finalists of ``source`` whose graph is not in ``seen``, each added to it as yielded
    (an extension and an omission can reach one graph; it is timed once)."""
    for f in source:
        if f.graph.key() not in seen:
            seen.add(f.graph.key())
            yield f


def _until(deadline: float, *sources: Iterator[Finalist]) -> list[Finalist]:
    """Finalists taken from ``sources`` in turn, one each, until all run out or ``deadline``
    passes (none is made past it)."""
    taken, live = [], list(sources)
    while live:
        for source in list(live):
            if time.perf_counter() >= deadline:
                return taken
            f = next(source, None)
            if f is None:
                live.remove(source)
                continue
            taken.append(f)
    return taken


def polish(agent, env: RewriteEnv, start: Finalist, deadline: float, top_k: int = 16,
           screen_rounds: int = 10, rounds: int = 40) -> tuple[Finalist, list[float]]:
    """Move ``start`` one rewrite at a time, more or fewer, while a move is confirmed faster.

    Each pass takes :func:`extensions` (one policy move more) and
    :func:`omissions` (one of its rewrites fewer) in turn, each graph once in
    the whole search, until they run out or half the time left has passed,
    screens them with the incumbent in up to ``screen_rounds`` interleaved
    rounds, re-times the two fastest against it in up to ``rounds`` fresh rounds
    (both with several compiles of each graph, as :func:`final_choice`, and
    with the rounds that fit before ``deadline``) and keeps the first whose
    paired verdict is a win (the screen picks, fresh rounds judge, so picking
    the luckiest of many does not decide). It stops when no move wins, none is
    left, or at ``deadline``; past ``deadline`` it times nothing. Returns the
    incumbent, its origin marked with the passes kept (and how many of them left
    a rewrite out), and the median ratio (old / new latency) of each kept pass.
    """
    best, gains, pruned, tried = start, [], 0, {start.graph.key()}
    while True:
        now = time.perf_counter()
        proposals = _until(now + (deadline - now) / 2,
                           _unseen(extensions(agent, env, best, top_k), tried),
                           _unseen(omissions(env, best), tried))
        kept = _confirmed(best, proposals, screen_rounds, rounds, deadline) if proposals else None
        if kept is None:
            break
        best, gains, pruned = kept[0], [*gains, kept[1]], pruned + (kept[0].origin == "pruned")
        if time.perf_counter() >= deadline:
            break
    if gains:
        best = replace(best, origin=f"{start.origin}, polished x{len(gains)}"
                       + (f" ({pruned} by leaving a rewrite out)" if pruned else ""))
    return best, gains


def best_of_k(agent, env: RewriteEnv, budget_s: float, extra: Sequence[Finalist] = ()
              ) -> Choice:
    """The fastest graph of the policy's rollouts within ``budget_s`` (see the module doc).

    ``1 - config.refine_share - config.polish_share`` of the budget goes to
    the greedy rollout and sampled rollouts (at least ``config.min_samples``
    where the refinement's time allows), ``config.refine_share`` to
    :func:`refine`, started from the best of those and ``extra`` by their
    end-of-episode measurement, and to :func:`final_choice`: the refined
    incumbent and the best distinct other graphs (``config.finalists`` in all)
    are timed, and the median decides, the statistic ``optimize``'s
    never-slower check and the benchmark's verdict use. The final choice gets
    the time its full rounds take, at most half the refinement's share. The
    rest of the budget goes to :func:`polish` of the winner. The estimated
    median of the polished winner is the final choice's, divided by the
    polishing gains. The greedy rollout is always taken; a rollout still
    running when the refinement's time ends stops where it is.
    """
    config = agent.config
    start = time.perf_counter()
    deadline = start + budget_s
    polish_s = budget_s * config.polish_share
    pool: dict[tuple, Finalist] = {}

    def add(f: Finalist) -> None:
        known = pool.get(f.graph.key())
        if known is None or f.screened_ms < known.screened_ms:
            pool[f.graph.key()] = f

    choice_s = min(budget_s * config.refine_share / 2,
                   choice_seconds(config.finalists, config.confirm, env.initial_ms))
    refine_end = deadline - polish_s - choice_s
    sampling_end = start + budget_s * (1.0 - config.refine_share - config.polish_share)
    add(rollout(agent, env, greedy=True, deadline=refine_end))
    for f in extra:
        add(f)
    rollouts = 1
    while (time.perf_counter() < sampling_end
           or (rollouts <= config.min_samples and time.perf_counter() < refine_end)):
        add(rollout(agent, env, greedy=False, deadline=refine_end))
        rollouts += 1
    first = min(pool.values(), key=lambda f: f.screened_ms)
    refined, reached, count = refine(agent, env, first, refine_end, config.seed)
    for f in reached:
        add(f)
    others = [f for f in sorted(pool.values(), key=lambda f: f.screened_ms)
              if f.graph.key() != refined.graph.key()]
    chosen, median = final_choice([refined, *others[: config.finalists - 1]], config.confirm,
                                  deadline - polish_s)
    polished, gains = polish(agent, env, chosen, deadline, config.polish_top_k)
    return Choice(polished, median / float(np.prod(gains)), rollouts + count, chosen)


SCREEN_ROUNDS = 20      # the final choice's rounds of every finalist, at most
CONFIRM_ROUNDS = 60     # ... and of the best few, fresh


def choice_seconds(finalists: int, confirm: int, latency_ms: float) -> float:
    """The time :func:`final_choice` takes at its full rounds for graphs of ``latency_ms``:
    every round runs each graph 11 times (a warm-up and 10 cycles), doubled, as interleaved
    calls of several compiles run slower than one compile's repeats."""
    runs = 11 * (SCREEN_ROUNDS * finalists + CONFIRM_ROUNDS * min(confirm, finalists))
    return 2 * runs * latency_ms / 1e3


def final_choice(finalists: Sequence[Finalist], confirm: int, deadline: float | None = None
                 ) -> tuple[Finalist, float]:
    """The finalist with the lowest median latency, and that median.

    All are timed in :data:`SCREEN_ROUNDS` interleaved rounds; the ``confirm``
    best of those are timed again in :data:`CONFIRM_ROUNDS` fresh rounds, and
    those alone decide. Each graph has
    :data:`~tempo.superopt.execute.DECISION_COMPILES` compiles, taken in
    turn (one compile's placement in memory moves its speed by about 1%).
    Taking the lowest of eight noisy medians favours a graph that was lucky
    in that sample (with differences of ~1% and IQRs of 10-20%, often a
    slower one); fresh measurements of the few best are free of that
    selection bias. With a ``deadline`` both timings run the rounds that fit,
    sharing the time by their full rounds' runs.
    """
    screen_end = None
    if deadline is not None:
        now = time.perf_counter()
        screen_runs = SCREEN_ROUNDS * len(finalists)
        confirm_runs = CONFIRM_ROUNDS * min(confirm, len(finalists))
        screen_end = now + (deadline - now) * screen_runs / (screen_runs + confirm_runs)
    screen = time_interleaved({str(i): f.graph for i, f in enumerate(finalists)},
                              rounds=SCREEN_ROUNDS, compiles=DECISION_COMPILES,
                              deadline=screen_end)
    best = sorted(range(len(finalists)), key=lambda i: screen[str(i)].median_ms)[:confirm]
    if len(best) == 1:
        return finalists[best[0]], screen[str(best[0])].median_ms
    timed = time_interleaved({str(i): finalists[i].graph for i in best}, rounds=CONFIRM_ROUNDS,
                             compiles=DECISION_COMPILES, deadline=deadline)
    winner = min(best, key=lambda i: timed[str(i)].median_ms)
    return finalists[winner], timed[str(winner)].median_ms
