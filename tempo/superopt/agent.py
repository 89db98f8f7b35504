"""The X-RLflow agent: PPO-clip with GAE over the rewriting environment (§3.3.4).

The loss is Eq. 5, ``L_clip + c1 L_vf - c2 H`` (the entropy is a bonus, so it
is subtracted from the minimised loss). Invalid actions are masked by giving
them a logit of -1e9, which zeroes their probability and their gradient.

Training runs for a share of the wall-clock budget; the rest goes to
inference (:func:`~tempo.superopt.inference.best_of_k`): rollouts of the
trained policy, then a refinement of the best of them by branching the
policy's own rollouts; the graphs measured fastest during training join the
pool. Every graph in that pool was produced by the agent's own rollouts from
the input graph; nothing comes from another search.
"""
from __future__ import annotations

import heapq
import io
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from torch.distributions import Categorical
from tqdm import tqdm

from tempo.errors import TempoError
from tempo.files import write_bytes_atomic
from tempo.superopt.encoder import PolicyValue, State, to_data
from tempo.superopt.costmodel import CostModel
from tempo.superopt.env import (EDGE_RANK, OP_NAMES, CostShapedReward, LinearDecay, RewriteEnv,
                                eq2_reward)
from tempo.superopt.graph import Graph
from tempo.superopt.inference import Finalist, best_of_k
from tempo.superopt.rules import Rule
from tempo.superopt.search import SearchResult
from tempo.superopt.windows import windows


@dataclass
class PPOConfig:
    """Hyper-parameters (defaults from the paper's Table 4 where it gives them)."""

    lr: float = 5e-4                 # Adam learning rate
    gamma: float = 0.99              # discount
    gae_lambda: float = 0.95         # GAE lambda
    clip: float = 0.2                # PPO clip epsilon
    c_value: float = 0.5             # value loss coefficient c1
    c_entropy: float = 0.01          # entropy coefficient c2
    reward_scale: float = 0.1        # Eq. 2 is in percent; scaled, the shared encoder's value
                                     # gradients do not drown the policy's
    episodes_per_update: int = 4     # roll-outs collected before each update
    epochs: int = 4                  # passes over each batch
    minibatch: int = 16              # batch size of an update step
    max_candidates: int = 128        # padded action space (plus the stop action)
    feedback_every: int = 1          # N: measure end-to-end latency every N steps
    max_steps: int = 60              # episode length limit (squeezenet needs ~30 fusions)
    hidden: int = 32                 # GNN width
    gat_layers: int = 3              # k graph-attention layers
    train_share: float = 0.75        # share of the budget spent training; the rest on inference
    window_ops: int = 16             # operators per window of the curriculum (windows.py)
    window_share: float = 0.4        # share of the training time spent on windows first
    min_samples: int = 4             # stochastic inference rollouts taken at least, time allowing
    refine_share: float = 0.5        # share of the inference time spent refining (inference.py)
    polish_share: float = 0.25       # ... and polishing the chosen graph (inference.py)
    polish_top_k: int = 16           # the policy's likeliest moves tried per polishing pass
    finalists: int = 8               # distinct graphs re-timed interleaved at the end
    shaping: float = 0.3             # weight of the cost-model shaping of the reward (env.py) when
    shaping_final: float = 0.3       # training starts, and when it ends (linear in between; 0, 0: none)
    confirm: int = 3                 # best finalists re-timed in fresh rounds to decide (inference.py)
    measurements_per_graph: int | None = None  # N: re-use a graph's first N measurements (env.py)
    imitate_best: int = 0            # self-imitation: the best episodes kept and re-learnt after each
                                     # update (0: none; Agent.imitate)
    seed: int = 0
    rule_names: tuple[str, ...] = ()  # the rule set the agent acts with (set when it is made)

    def __post_init__(self) -> None:
        if self.shaping < 0 or self.shaping_final < 0:
            raise TempoError(f"PPOConfig: shaping weights must be >= 0, not shaping={self.shaping}, "
                             f"shaping_final={self.shaping_final}")
        if not (self.refine_share >= 0 and self.polish_share >= 0
                and self.refine_share + self.polish_share <= 1):
            raise TempoError(f"PPOConfig: refine_share and polish_share must be >= 0 with a sum of at "
                             f"most 1 (shares of the inference time), not refine_share="
                             f"{self.refine_share}, polish_share={self.polish_share}")
        if self.polish_top_k < 1:
            raise TempoError(f"PPOConfig: polish_top_k must be >= 1, not {self.polish_top_k}")
        if self.measurements_per_graph is not None and self.measurements_per_graph < 1:
            raise TempoError(f"PPOConfig: measurements_per_graph must be None or >= 1, not "
                             f"{self.measurements_per_graph}")
        if self.imitate_best < 0:
            raise TempoError(f"PPOConfig: imitate_best must be >= 0, not {self.imitate_best}")


@dataclass
class Step:
    state: State
    action: int
    logprob: float
    value: float
    reward: float
    done: bool


@dataclass(order=True)
class Episode:
    """A finished episode for self-imitation: its return and each step's discounted return-to-go."""

    total: float
    tie: int                                            # insertion order, so totals may repeat
    steps: list[Step] = field(compare=False)
    to_go: list[float] = field(compare=False)


@dataclass
class TrainLog:
    """Per-episode returns and final latencies, and the number of updates."""

    returns: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    updates: int = 0


class Agent:
    """A policy/value network over graphs and the PPO procedure that trains it."""

    def __init__(self, config: PPOConfig, rules: list[Rule]):
        self.config = replace(config, rule_names=tuple(r.name for r in rules))
        torch.manual_seed(self.config.seed)
        self.net = PolicyValue(len(OP_NAMES), EDGE_RANK, self.config.max_candidates, len(rules),
                               self.config.hidden, self.config.gat_layers)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.config.lr)
        self._data: dict[int, tuple] = {}
        self.rng = np.random.default_rng(self.config.seed)
        self.best: list[Episode] = []       # a min-heap of the best episodes (imitate_best of them)
        self._episodes = 0

    # ---------------------------------------------------------------- acting
    def _convert(self, g):
        if id(g) not in self._data:
            if len(self._data) > 8192:
                self._data.clear()
            self._data[id(g)] = (g, to_data(g))
        return self._data[id(g)][1]

    def state(self, obs: dict) -> State:
        """The network's input for an observation."""
        return (self._convert(obs["current"]), torch.as_tensor(obs["roots"]),
                torch.as_tensor(obs["rules"]), torch.as_tensor(obs["mask"]))

    def act(self, obs: dict, greedy: bool = False) -> tuple[int, float, float, tuple]:
        """An action (masked), its log-probability, the state value and the state."""
        state = self.state(obs)
        with torch.no_grad():
            logits, value = self.net([state])
        dist = Categorical(logits=logits[0])
        action = int(logits[0].argmax()) if greedy else int(dist.sample())
        return action, float(dist.log_prob(torch.tensor(action))), float(value[0]), state

    # ---------------------------------------------------------------- learning
    def _collect(self, envs: Sequence[RewriteEnv], log: TrainLog, deadline: float) -> list[Step]:
        """Up to ``config.episodes_per_update`` episodes, none started past ``deadline``; one
        still running at ``deadline`` is dropped."""
        steps: list[Step] = []
        for _ in range(self.config.episodes_per_update):
            if time.perf_counter() >= deadline:
                break
            env = envs[len(log.returns) % len(envs)]
            obs, _ = env.reset()
            done, total, episode = False, 0.0, []
            while not done:
                if time.perf_counter() >= deadline:
                    return steps
                action, logprob, value, state = self.act(obs)
                obs, reward, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                total += reward
                episode.append(Step(state, action, logprob, value,
                                    reward * self.config.reward_scale, done))
            steps += episode
            self._remember(episode, total)
            log.returns.append(total)
            log.latencies_ms.append(info["latency_ms"])
        return steps

    def _advantages(self, steps: list[Step]) -> tuple[np.ndarray, np.ndarray]:
        c = self.config
        adv = np.zeros(len(steps), np.float32)
        last = 0.0
        for t in reversed(range(len(steps))):
            nxt = 0.0 if steps[t].done else steps[t + 1].value
            delta = steps[t].reward + c.gamma * nxt - steps[t].value
            last = delta + c.gamma * c.gae_lambda * (0.0 if steps[t].done else last)
            adv[t] = last
        returns = adv + np.array([s.value for s in steps], np.float32)
        return adv, returns

    def _remember(self, episode: list[Step], total: float) -> None:
        """Keep ``episode`` if it is among the ``imitate_best`` best returns so far."""
        if not self.config.imitate_best:
            return
        to_go, running = [], 0.0
        for s in reversed(episode):
            running = s.reward + self.config.gamma * running
            to_go.append(running)
        self._episodes += 1
        item = Episode(total, self._episodes, episode, to_go[::-1])
        if len(self.best) < self.config.imitate_best:
            heapq.heappush(self.best, item)
        elif item > self.best[0]:
            heapq.heapreplace(self.best, item)

    def imitate(self) -> float:
        """Self-imitation (Oh et al., 2018): one pass over the best episodes kept, raising the
        probability of each action whose return-to-go beat the value estimate, in proportion to
        that gap, and lifting the value towards it. Returns the mean loss (0.0 with none kept).

        A sequence that is slower before it is faster (X-RLflow's case: enlarge a convolution,
        then merge it) may turn up in a few stochastic roll-outs only; PPO learns from each once
        and its noisy advantage can wash it out, while this keeps learning from it.
        """
        c = self.config
        pairs = [(s, g) for ep in self.best for s, g in zip(ep.steps, ep.to_go)]
        if not pairs:
            return 0.0
        losses = []
        order = self.rng.permutation(len(pairs))
        for lo in range(0, len(pairs), c.minibatch):
            batch = [pairs[i] for i in order[lo:lo + c.minibatch]]
            logits, values = self.net([s.state for s, _ in batch])
            logp = Categorical(logits=logits).log_prob(torch.tensor([s.action for s, _ in batch]))
            gap = (torch.tensor([g for _, g in batch]) - values).clamp(min=0.0)
            if not bool((gap > 0).any()):      # nothing to learn: no optimiser step (momentum)
                continue
            loss = -(logp * gap.detach()).mean() + 0.5 * c.c_value * (gap ** 2).mean()
            self.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
            self.opt.step()
            losses.append(loss.item())
        return float(np.mean(losses)) if losses else 0.0

    def update(self, steps: list[Step], deadline: float | None = None) -> dict[str, float]:
        """PPO-clip epochs over ``steps``; the losses of the last minibatch. With a ``deadline``
        (a :func:`time.perf_counter` value) no minibatch after the first starts past it."""
        c = self.config
        adv, returns = self._advantages(steps)
        actions = torch.tensor([s.action for s in steps])
        old_logp = torch.tensor([s.logprob for s in steps])
        adv_t, ret_t = torch.from_numpy(adv), torch.from_numpy(returns)
        stats: dict[str, float] = {}
        for _ in range(c.epochs):
            order = self.rng.permutation(len(steps))
            for lo in range(0, len(steps), c.minibatch):
                if stats and deadline is not None and time.perf_counter() >= deadline:
                    return stats
                mb = torch.as_tensor(order[lo:lo + c.minibatch])
                logits, values = self.net([steps[i].state for i in mb.tolist()])
                dist = Categorical(logits=logits)
                ratio = torch.exp(dist.log_prob(actions[mb]) - old_logp[mb])
                a = adv_t[mb]
                if len(mb) > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(1 - c.clip, 1 + c.clip)).mean()
                v_loss = ((values - ret_t[mb]) ** 2).mean()
                entropy = dist.entropy().mean()
                loss = pg + c.c_value * v_loss - c.c_entropy * entropy
                self.opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
                self.opt.step()
                stats = {"policy": pg.item(), "value": v_loss.item(), "entropy": entropy.item()}
        return stats

    def train(self, envs: RewriteEnv | Sequence[RewriteEnv], budget_s: float, progress: bool = True
              ) -> TrainLog:
        """Alternate roll-outs and PPO updates until ``budget_s`` seconds have passed.

        Training stops within one environment step or one PPO minibatch of
        ``budget_s``: an episode cut short is not learned from, and an update
        that reaches ``budget_s`` stops between minibatches.

        With several environments (graphs), episodes take them in turn: one
        policy learns what the rules do across graphs (pre-training). With
        ``imitate_best``, each update is followed by :meth:`imitate` on the best
        episodes of this call (returns on other graphs are not comparable).
        """
        envs = [envs] if isinstance(envs, RewriteEnv) else list(envs)
        log = TrainLog()
        self.best = []
        start = time.perf_counter()
        with tqdm(total=round(budget_s), unit="s", desc="PPO", disable=not progress,
                  leave=False) as bar:
            while time.perf_counter() - start < budget_s:
                steps = self._collect(envs, log, start + budget_s)
                if not steps:
                    break
                stats = self.update(steps, start + budget_s)
                if self.config.imitate_best:
                    stats["imitate"] = self.imitate()
                log.updates += 1
                bar.n = min(round(time.perf_counter() - start), bar.total)
                bar.set_postfix(**{k: f"{v:.3f}" for k, v in stats.items()})
        return log

    # ---------------------------------------------------------------- persistence
    def save(self, path: str) -> None:
        """Write the network and config atomically."""
        buffer = io.BytesIO()
        torch.save({"config": asdict(self.config), "state": self.net.state_dict()}, buffer)
        write_bytes_atomic(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str, rules: list[Rule]) -> Agent:
        """An agent saved by :meth:`save`, to act with ``rules`` (the rule set it was trained with)."""
        try:
            blob = torch.load(path, weights_only=True)
        except FileNotFoundError:
            raise TempoError(f"no such agent file '{path}'") from None
        except Exception as exc:  # torch raises several types for corrupt files
            raise TempoError(f"'{path}' is not a saved superopt agent ({type(exc).__name__})") from None
        config = PPOConfig(**{**blob["config"], "rule_names": tuple(blob["config"]["rule_names"])})
        names = tuple(r.name for r in rules)
        if config.rule_names != names:
            raise TempoError(f"agent '{path}' was trained with a different rule set "
                             f"({len(config.rule_names)} rules, not these {len(names)})")
        agent = cls(config, rules)
        agent.net.load_state_dict(blob["state"])
        return agent


def make_env(graph: Graph, rules: list[Rule], config: PPOConfig, inference: bool = False,
             model: CostModel | None = None,
             shaping: float | Callable[[], float] | None = None) -> RewriteEnv:
    """The environment an agent with ``config`` plays on ``graph``.

    For ``inference`` the graph is measured only when an episode ends: the
    intermediate rewards are not used, so their measurements would waste time.
    Training rewards are shaped by the cost model with weight ``shaping`` (a
    number, or a callable such as :class:`~tempo.superopt.env.LinearDecay`;
    default ``config.shaping``, constant); pass ``model`` to share its
    measured operators between environments.
    """
    every = config.max_steps + 1 if inference else config.feedback_every
    weight = config.shaping if shaping is None else shaping
    reward = eq2_reward
    if not inference and (callable(weight) or weight):
        reward = CostShapedReward(model or CostModel(), weight)
    return RewriteEnv(graph, rules, config.max_candidates, every, config.max_steps, reward,
                      candidate_graphs=False, measurements_per_graph=config.measurements_per_graph)


def optimize_with_agent(graph: Graph, rules: list[Rule], budget_s: float, load: str | None = None,
                        save: str | None = None, seed: int = 0, config: PPOConfig | None = None,
                        progress: bool = True, model: CostModel | None = None) -> SearchResult:
    """Train an agent on ``graph`` (or load one), then return its best-of-K inference result.

    Training takes ``config.train_share`` of ``budget_s`` and inference what
    is left of it (the whole call keeps to ``budget_s`` but for the work between
    two looks at the clock: an environment step, a minibatch, a round of timing);
    a loaded agent spends the whole budget on inference. Training
    starts on windows of the graph (a curriculum, ``config.window_share`` of
    the training time), then goes on with the whole graph. The cost-model
    shaping weight (``model``'s costs; a torch-timed model unless given) decays
    linearly from ``config.shaping`` to ``config.shaping_final`` over the whole
    training time.
    """
    start = time.perf_counter()
    deadline = start + budget_s
    agent = Agent.load(load, rules) if load else Agent(config or PPOConfig(seed=seed), rules)
    extra: list[Finalist] = []
    episodes = 0
    if load is None:
        train_s = budget_s * agent.config.train_share
        model = model or CostModel()
        shaping = LinearDecay(agent.config.shaping, agent.config.shaping_final, train_s)
        parts = [make_env(w, rules, agent.config, model=model, shaping=shaping)
                 for w in windows(graph, agent.config.window_ops)] if agent.config.window_share > 0 else []
        if parts:
            episodes += len(agent.train(parts, train_s * agent.config.window_share, progress).returns)
        env = make_env(graph, rules, agent.config, model=model, shaping=shaping)
        episodes += len(agent.train(env, max(0.0, start + train_s - time.perf_counter()),
                                    progress).returns)
        extra += [Finalist(m.graph, m.applied, "fast in training", m.latency_ms, m.actions)
                  for m in env.fastest(agent.config.finalists)]
    if save:
        agent.save(save)
    choice = best_of_k(agent, make_env(graph, rules, agent.config, inference=True),
                       max(0.0, deadline - time.perf_counter()), extra)
    chosen = choice.finalist
    return SearchResult(chosen.graph, chosen.applied, choice.median_ms, explored=choice.rollouts,
                        origin=chosen.origin, stages={"unpolished": choice.unpolished.graph},
                        episodes=episodes)
