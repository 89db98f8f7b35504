"""The graph-rewriting game as a gymnasium environment (X-RLflow §3.3).

State: the current graph and every candidate graph one rewrite away. Each
graph is a :class:`gymnasium.spaces.GraphInstance`: node features are a
one-hot op type, edge features the tensor's shape (padded to rank 4 with
leading zeros) divided by ``M``. Action ``0`` stops (keeps the current
graph); action ``i >= 1`` takes candidate ``i``; ``mask`` marks the valid
actions (the action space is padded to ``max_candidates + 1``). Candidates
that return to a graph already visited in the episode are left out, so an
episode cannot spend its steps undoing and redoing an involution such as
``add_comm``. ``rules``
names, per action, the rule that made the candidate (its index in the rule
list; ``len(rules)`` for the stop action and padding), so a policy can learn
what each rule tends to do to latency without inferring the rule from two
graph embeddings. ``roots`` gives, per action, the positions (in the current
graph's node order, ``-1`` padded) of the nodes the rewrite replaces, so a
policy can score a candidate by where it rewrites the current graph; with
``candidate_graphs=False`` the candidate graphs themselves are left out of the
observation (``candidates`` is empty), which saves encoding them when the
policy reads only the locations.

Reward: every ``feedback_every`` steps, and when the episode ends, the graph's
end-to-end latency is measured and the reward is Eq. 2,
``(RT_prev - RT_now) / RT_0 * 100``. The graph is timed side by side with the
graph of the previous measurement (``repeats`` cycles, each running both once
in a random order) and ``RT_now`` is ``RT_prev`` over the median of the
cycle-paired ratios: a shared machine's speed moves by up to 2x in phases
of tens to hundreds of milliseconds, and a graph timed alone, against a
measurement taken steps earlier, would carry that into the reward whole.
``RT_0`` is the median of three fastest-of-``repeats`` runs of the input
graph alone. Between measurements the reward is a small constant (0.01:
larger, it pays an agent to keep taking neutral rewrites such as ``add_comm``
back and forth instead of stopping). With ``measurements_per_graph = N`` a graph's latency is the
median of its first N measurements and later visits reuse them: fewer
measurements per step, but a re-used value can be minutes older than the
measurement it is compared with (default None: every visit is measured).
Both rewards are a callback, :class:`RewardFn`, that users can swap;
:class:`CostShapedReward` adds dense shaping by the cost model.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tempo.errors import TempoError
from tempo.superopt.costmodel import CostModel
from tempo.superopt.execute import measure_latency, time_interleaved
from tempo.superopt.graph import OPS, Graph
from tempo.superopt.rewrite import Candidate, candidates
from tempo.superopt.rules import Rule
from tempo.superopt.stats import paired_speedup

OP_NAMES = tuple(sorted(OPS))
EDGE_RANK = 4
MAX_ROOTS = 2                   # the most roots a rule's source pattern has


def encode(graph: Graph, scale: float = 4096.0) -> spaces.GraphInstance:
    """Node one-hot op types, edges source -> consumer with normalised shapes."""
    order = graph.topo()
    index = {id(n): i for i, n in enumerate(order)}
    nodes = np.zeros((len(order), len(OP_NAMES)), np.float32)
    nodes[np.arange(len(order)), [OP_NAMES.index(n.op) for n in order]] = 1.0
    links, edges = [], []
    for n in order:
        for s in n.src:
            links.append((index[id(s)], index[id(n)]))
            shape = s.shape[-EDGE_RANK:]
            edges.append((0,) * (EDGE_RANK - len(shape)) + shape)
    return spaces.GraphInstance(nodes, np.asarray(edges, np.float32).reshape(-1, EDGE_RANK) / scale,
                                np.asarray(links, np.int64).reshape(-1, 2))


@dataclass(frozen=True)
class Feedback:
    """What a reward callback sees after one step."""

    measured: bool
    latency_ms: float           # the new measurement (when measured)
    previous_ms: float          # the last measurement before it
    initial_ms: float           # RT_0
    graph: Graph                # the graph after the step
    previous: Graph             # the graph before it
    start: Graph                # the episode's input graph


RewardFn = Callable[[Feedback], float]


@dataclass(frozen=True)
class Measured:
    """A graph reached in an episode, its measured latency and how it was reached."""

    latency_ms: float
    graph: Graph
    applied: list[str]          # the rules applied, in order
    actions: list[int]          # the actions taken from the input graph (replayable on any env
                                # of the same graph, rules and ``max_candidates``)


def eq2_reward(fb: Feedback, between: float = 0.01) -> float:
    """X-RLflow's Eq. 2 when a measurement is available, a small constant otherwise."""
    if not fb.measured:
        return between
    return (fb.previous_ms - fb.latency_ms) / fb.initial_ms * 100.0


@dataclass
class LinearDecay:
    """A weight that goes linearly from ``initial`` to ``final`` over ``seconds`` of wall-clock
    time from its creation, then stays at ``final``."""

    initial: float
    final: float
    seconds: float
    born: float = field(default_factory=time.perf_counter)

    def __call__(self) -> float:
        elapsed = time.perf_counter() - self.born
        progress = min(elapsed / self.seconds, 1.0) if self.seconds > 0 else 1.0
        return self.initial + progress * (self.final - self.initial)


@dataclass
class CostShapedReward:
    """Eq. 2 plus shaping by TASO's cost model: ``weight * (C(previous) - C(now)) / C(input) * 100``.

    Over an episode the shaping terms sum to the cost model's improvement of
    the final graph (in percent of the input's modelled cost), so a multi-step
    rewrite that the model judges good when finished is not penalised on the
    way. They come at every step, measured or not, and carry no measurement
    noise, so the policy learns the rewrites every cost model agrees on (fuse a
    conv and its relu) in a few updates; the measured term still decides
    where the model is wrong. ``weight`` is a number or a callable giving the
    current weight (:class:`LinearDecay`: the model leads early in training,
    the measurements have the last word). An input the model prices at nothing
    (opaque steps only, or operators that read only weights) gets no shaping.
    """

    model: CostModel
    weight: float | Callable[[], float] = 1.0
    between: float = 0.01
    costs: dict = field(default_factory=dict)   # graph key -> modelled cost

    def cost(self, graph: Graph) -> float:
        """The modelled cost of ``graph`` (remembered: episodes revisit the same graphs)."""
        key = graph.key()
        if key not in self.costs:
            if len(self.costs) > 4096:
                self.costs.clear()
            self.costs[key] = self.model.cost(graph)
        return self.costs[key]

    def __call__(self, fb: Feedback) -> float:
        weight = self.weight() if callable(self.weight) else self.weight
        start = self.cost(fb.start)
        shaping = (self.cost(fb.previous) - self.cost(fb.graph)) / start if start > 0 else 0.0
        return eq2_reward(fb, self.between) + weight * shaping * 100.0


class RewriteEnv(gym.Env):
    """Choose a sequence of rewrites on one graph; rewarded by measured latency."""

    metadata = {"render_modes": []}

    def __init__(self, graph: Graph, rules: list[Rule], max_candidates: int = 64,
                 feedback_every: int = 5, max_steps: int = 30, reward_fn: RewardFn = eq2_reward,
                 repeats: int = 10, edge_scale: float = 4096.0, candidate_graphs: bool = True,
                 measurements_per_graph: int | None = None):
        if measurements_per_graph is not None and measurements_per_graph < 1:
            raise TempoError(f"RewriteEnv: measurements_per_graph must be None or >= 1, not "
                             f"{measurements_per_graph}")
        self.start, self.rules, self.candidate_graphs = graph, rules, candidate_graphs
        self.measurements_per_graph = measurements_per_graph
        self.max_candidates, self.feedback_every, self.max_steps = max_candidates, feedback_every, max_steps
        self.reward_fn, self.repeats, self.edge_scale = reward_fn, repeats, edge_scale
        graph_space = spaces.Graph(spaces.Box(0.0, 1.0, (len(OP_NAMES),)),
                                   spaces.Box(0.0, np.inf, (EDGE_RANK,)))
        self.observation_space = spaces.Dict({
            "current": graph_space,
            "candidates": spaces.Sequence(graph_space),
            "mask": spaces.MultiBinary(max_candidates + 1),
            "rules": spaces.MultiDiscrete([len(rules) + 1] * (max_candidates + 1)),
            "roots": spaces.Box(-1, np.iinfo(np.int64).max, (max_candidates + 1, MAX_ROOTS), np.int64),
        })
        self._rule_index = {id(r): i for i, r in enumerate(rules)}
        self.action_space = spaces.Discrete(max_candidates + 1)
        # RT_0 scales every reward: the median of three measurements of the input alone
        self._samples = {graph.key(): [measure_latency(graph, repeats=repeats, warmup=2).min_ms
                                       for _ in range(3)]}       # key -> measurements
        self.initial_ms = float(np.median(self._samples[graph.key()]))
        self.last_graph, self.last_ms = graph, self.initial_ms
        self.measured: dict[tuple, Measured] = {}   # graph key -> its fastest measurement
        self._encoded: dict = {}
        self._listed: dict = {}

    def _measure(self, graph: Graph) -> float:
        """``graph``'s latency: the last measured graph's over ``graph``'s speed-up on it, the two
        timed side by side (:func:`~tempo.superopt.stats.paired_speedup`)."""
        if graph.key() == self.last_graph.key():
            return self.last_ms
        lat = time_interleaved({"last": self.last_graph, "now": graph}, rounds=1,
                               repeats=self.repeats)
        return self.last_ms / paired_speedup(lat["last"], lat["now"], 1)

    def _latency(self, graph: Graph) -> float:
        """A fresh measurement, or with ``measurements_per_graph`` the median of the graph's first
        that many measurements (taken as it is visited; later visits reuse them)."""
        if self.measurements_per_graph is None:
            return self._measure(graph)
        samples = self._samples.setdefault(graph.key(), [])
        if len(samples) < self.measurements_per_graph:
            samples.append(self._measure(graph))
        return float(np.median(samples))

    def _graph_obs(self, graph: Graph) -> spaces.GraphInstance:
        return self._encoding(graph)[1]

    def _encoding(self, graph: Graph) -> tuple[dict[int, int], spaces.GraphInstance]:
        """The graph's observation and each node's position in it (by node id)."""
        key = graph.key()
        if key not in self._encoded:
            if len(self._encoded) > 4096:
                self._encoded.clear()
            position = {id(n): i for i, n in enumerate(graph.topo())}
            self._encoded[key] = (graph, position, encode(graph, self.edge_scale))
        return self._encoded[key][1:]

    def _candidates(self, graph: Graph) -> list[Candidate]:
        """Every candidate of ``graph``, remembered: episodes revisit the same graphs."""
        key = graph.key()
        if key not in self._listed:
            if len(self._listed) > 4096:
                self._listed.clear()
            self._listed[key] = candidates(graph, self.rules)
        return self._listed[key]

    def _observe(self) -> dict:
        self.visited.add(self.graph.key())
        fresh = [c for c in self._candidates(self.graph) if c.graph.key() not in self.visited]
        self.cands = fresh[: self.max_candidates]
        mask = np.zeros(self.max_candidates + 1, np.int8)
        mask[: len(self.cands) + 1] = 1
        made_by = np.full(self.max_candidates + 1, len(self.rules), np.int64)
        made_by[1: len(self.cands) + 1] = [self._rule_index[id(c.rule)] for c in self.cands]
        position, current = self._encoding(self.graph)
        roots = np.full((self.max_candidates + 1, MAX_ROOTS), -1, np.int64)
        for i, c in enumerate(self.cands, start=1):
            roots[i, : len(c.match.roots)] = [position[id(r)] for r in c.match.roots]
        others = tuple(self._graph_obs(c.graph) for c in self.cands) if self.candidate_graphs else ()
        return {"current": current, "candidates": others, "mask": mask, "rules": made_by,
                "roots": roots}

    def fastest(self, k: int) -> list[Measured]:
        """The ``k`` distinct graphs with the lowest measurement so far."""
        return sorted(self.measured.values(), key=lambda m: m.latency_ms)[:k]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start again from the input graph."""
        super().reset(seed=seed)
        self.graph, self.applied, self.actions, self.steps = self.start, [], [], 0
        self.visited: set = set()
        self.last_graph, self.last_ms = self.start, self.initial_ms
        obs = self._observe()
        return obs, {"latency_ms": self.initial_ms, "candidates": len(self.cands)}

    def step(self, action: int):
        """Take candidate ``action`` (1-based) or stop (0)."""
        action = int(action)
        if not 0 <= action <= len(self.cands):
            raise ValueError(f"action {action} is masked out ({len(self.cands)} candidates)")
        stop = action == 0
        previous = self.graph
        if not stop:
            chosen = self.cands[action - 1]
            self.graph, self.applied = chosen.graph, [*self.applied, chosen.rule.name]
        self.actions = [*self.actions, action]
        self.steps += 1
        obs = self._observe()
        done = stop or not self.cands
        truncated = not done and self.steps >= self.max_steps
        measured = done or truncated or self.steps % self.feedback_every == 0
        now = self._latency(self.graph) if measured else self.last_ms
        reward = self.reward_fn(Feedback(measured, now, self.last_ms, self.initial_ms, self.graph,
                                         previous, self.start))
        if measured:
            self.last_graph, self.last_ms = self.graph, now
            known = self.measured.get(self.graph.key())
            if known is None or now < known.latency_ms:
                self.measured[self.graph.key()] = Measured(now, self.graph, list(self.applied),
                                                           list(self.actions))
        info = {"latency_ms": now, "measured": measured, "applied": list(self.applied)}
        return obs, float(reward), done, truncated, info
