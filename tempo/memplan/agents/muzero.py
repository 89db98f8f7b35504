"""MMap-MuZero (§4.3): learned model + MCTS (``mctx``) self-play with Drop-backup.

Self-play runs ``parallel`` games at once, so one batched search serves them
all. Each move: observe (§4.3.1 features), search over the learned model with
``mctx.gumbel_muzero_policy`` (Gumbel MuZero: with 3 actions and a handful of
simulations it still improves the policy, where visit counts would be too
coarse; the root masks illegal actions), and play from the improved policy
(greedily in the first ``greedy_actors`` games, sampled with a decaying
temperature in the others). Transitions go to a replay buffer once their ``n``-step
value target is known; the networks train on K-step unrolls in between moves.

**Memory price** (``memory_price``). A move's training reward is its benefit less the fast memory
it holds (bytes x steps of the intervals it placed) at ``memory_price`` times the dual price of the
fractional knapsack (:func:`~tempo.memplan.features.memory_price`). Without it the learned model
prices fast memory at nothing, and on transformer programs the search drifts to filling it with
whatever pays at once. The answer is always judged by the game's own return.

**Root lookahead** (``lookahead``; a departure from the paper's MuZero, whose search uses the
learned reward everywhere). Before each search, every legal move at the root is played on the game
(with the automatic moves after it) and taken back (:meth:`Episode.lookahead`): its training reward
becomes that root action's reward in the search, and the rewards of the moves not played become
targets of the reward head, which otherwise only ever learns the reward of the move played. Below
the root the search uses the learned dynamics, reward and value. Without the lookahead the learned
reward head does not learn within a minute what Copy would have paid where self-play plays NoCopy,
so the search keeps playing NoCopy (``python examples/memplan_muzero_probe.py INSTANCE.json
lookahead=False``; docs/memplan.md, "Why the root lookahead").

The agent searches only at decision points: moves with one legal action, and
free reuses, are played automatically (:mod:`episode`), and a decision's
reward includes the automatic moves that follow it.

**Drop-backup (§4.3.2).** When a move leads to a lost state the game is
rewound to its backup and the stuck alias group is forced to Drop
(:class:`Episode`); the losing move is stored with the local negative reward
(the return lost since the backup). When the budget runs out, the games in
flight are completed from their backups by Drop moves, so the agent always
has an answer: the best complete game it played.

**Demonstrations** (``demonstrations``, off by default: they do not help in the
benchmark's ablation, docs/memplan.md). Before self-play, the heuristic's
decisions are replayed as one game (:mod:`demonstration`); its transitions join
the replay buffer, marked so that Reanalyse refreshes their targets, and the
networks train on them for a few seconds. That game is never offered to the
tracker: the answer is one of the agent's own self-play games.

``num_simulations = 0`` is the no-search ablation of Fig. 7: actions are
sampled from the policy network, whose target is then the softmax of one-step
model values ``r(s, a) + gamma * v(s')``.
"""
from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np

from tempo.memplan.agents.base import SearchResult, Tracker
from tempo.memplan.agents.demonstration import Demonstrator, policy_target, returns_to_go
from tempo.memplan.agents.episode import Episode, finish_best_in_flight
from tempo.memplan.features import SHAPES, Observer, benefit_scale, memory_price
from tempo.memplan.problem import Instance, MemplanError


@dataclass(frozen=True)
class MuZeroConfig:
    """Hyper-parameters (Appendix C where they apply at this scale)."""

    parallel: int | None = None   # games played at once (one batched search); None: games_in_flight()
    num_simulations: int = 8      # MCTS simulations per move (0: no search)
    discount: float = 0.9
    td_steps: int = 10            # n of the n-step value target (decisions)
    unroll: int = 3               # K of the K-step model unroll
    batch_size: int = 32
    replay_size: int = 20_000
    learning_rate: float = 5e-4
    train_every: int = 8          # moves (of all games) between gradient steps
    init_temperature: float = 1.0   # visit-count sampling temperature, decayed linearly
    final_temperature: float = 0.2  # over the budget (Appendix C decays over steps)
    greedy_actors: int = 2          # games that always play the improved policy's best action
    reanalyse: float = 0.0          # share of each batch whose root targets are recomputed (Appendix C)
    demonstrations: bool = False    # replay the heuristic's decisions as a demonstration game first
    demo_steps: int = 200           # gradient steps on the demonstration before self-play starts
    demo_share: float = 0.15        # at most this share of the budget for the demonstration and its steps
    memory_price: float = 1.0       # training rewards pay this times features.memory_price per byte-step
    lookahead: bool = True          # root rewards from the game: each legal move played and undone


def config_with(overrides: list[str], base: MuZeroConfig = MuZeroConfig()) -> MuZeroConfig:
    """``base`` with ``FIELD=VALUE`` items applied (each value a Python literal, e.g. ``td_steps=1000``).

    Raises :class:`~tempo.memplan.problem.MemplanError` naming the first item that is not a field
    or whose value is not a literal.
    """
    known = {f.name for f in fields(MuZeroConfig)}
    changes = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or name not in known:
            raise MemplanError(f"'{item}': expected FIELD=VALUE with FIELD one of "
                               f"{', '.join(sorted(known))}")
        try:
            changes[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise MemplanError(f"'{item}': the value must be a Python literal "
                               f"(e.g. {name}=True)") from None
    return replace(base, **changes)


def parsed_config(parser, overrides: list[str]) -> MuZeroConfig:
    """:func:`config_with` for a command line: a bad item is ``parser``'s usage error."""
    try:
        return config_with(overrides)
    except MemplanError as err:
        parser.error(str(err))


SEARCH_BATCH = 16   # searches are padded to this many states: one compiled shape for every program
_NO_SIBLINGS = np.full(3, np.nan, np.float32)   # no reward known for any root action


def games_in_flight(inst: Instance) -> int:
    """Games to play at once: 16 share one batched search cheaply, but each batched move costs
    a few milliseconds more per game, so big programs run fewer games to finish one in time."""
    n = len(inst.buffers)
    return 16 if n <= 2_000 else 8 if n <= 5_000 else 4


def _pack(obs: dict) -> tuple[np.ndarray, dict]:
    return np.packbits(obs["memory_map"] > 0.5), {k: v for k, v in obs.items() if k != "memory_map"}


def _unpack(packed: np.ndarray) -> np.ndarray:
    side = SHAPES["memory_map"][0]
    return np.unpackbits(packed)[: side * side].reshape(side, side).astype(np.float32)


def _observation(packed: tuple) -> dict:
    """The observation :func:`_pack` stored."""
    return {**packed[1], "memory_map": _unpack(packed[0])}


@dataclass
class _Move:
    index: int
    packed: tuple
    legal: np.ndarray
    action: int
    reward: float
    policy: np.ndarray
    value: float
    siblings: np.ndarray | None = None   # training rewards of the other legal actions (NaN: none)


@dataclass
class _Replay:
    """Self-play transitions (a ring of ``size``) and demonstration transitions (kept for good)."""

    size: int
    items: list = field(default_factory=list)
    demos: list = field(default_factory=list)
    cursor: int = 0

    def add(self, item) -> None:
        if len(self.items) < self.size:
            self.items.append(item)
        else:
            self.items[self.cursor] = item
            self.cursor = (self.cursor + 1) % self.size

    def __len__(self) -> int:
        return len(self.items) + len(self.demos)

    def sample(self, rng: np.random.Generator, n: int) -> list:
        """``n`` transitions drawn uniformly, demonstrations first (Reanalyse refreshes those)."""
        picks = [self.demos[i - len(self.items)] if i >= len(self.items) else self.items[i]
                 for i in rng.integers(0, len(self), n)]
        return sorted(picks, key=lambda p: not p.get("demo", False))


def _search(params, seed, obs, invalid, root_rewards, config: MuZeroConfig):
    """Batched root search: (behaviour distribution, policy target, root value) per state.

    ``root_rewards`` (state x action) replaces the learned reward of a root action where it is not
    NaN (``MuZeroConfig.lookahead``)."""
    import jax
    import jax.numpy as jnp
    import mctx

    from tempo.memplan.agents import muzero_nets as nets

    key = jax.random.PRNGKey(seed)
    latent = nets.represent(params, obs)
    prior, value = nets.predict(params, latent)
    value = nets.to_scalar(value)
    if config.num_simulations == 0:
        nxt, reward = nets.dynamics(params, jnp.repeat(latent, 3, 0),
                                    jnp.tile(jnp.arange(3), latent.shape[0]))
        q = (nets.to_scalar(reward) + config.discount * nets.to_scalar(
            nets.predict(params, nxt)[1])).reshape(-1, 3)
        q = jnp.where(invalid, -jnp.inf, q)
        spread = jnp.maximum(jnp.where(invalid, 0.0, q).std(-1, keepdims=True), 1e-3)
        logits = jnp.where(invalid, -jnp.inf, prior)
        return jax.nn.softmax(logits), jax.nn.softmax(q / spread), value

    def recurrent(params, _, action, embedding):
        latent, given, at_root = embedding
        nxt, reward = nets.dynamics(params, latent, action)
        policy, value = nets.predict(params, nxt)
        given = given[jnp.arange(action.shape[0]), action]
        reward = jnp.where(at_root & ~jnp.isnan(given), given, nets.to_scalar(reward))
        out = mctx.RecurrentFnOutput(
            reward=reward, discount=jnp.full(action.shape, config.discount),
            prior_logits=policy, value=nets.to_scalar(value))
        return out, (nxt, embedding[1], jnp.zeros_like(at_root))

    root = mctx.RootFnOutput(prior_logits=prior, value=value,
                             embedding=(latent, root_rewards, jnp.ones(latent.shape[0], bool)))
    out = mctx.gumbel_muzero_policy(params, key, root, recurrent, config.num_simulations,
                                    invalid_actions=invalid, max_num_considered_actions=3)
    return out.action_weights, out.action_weights, value


def _value(params, obs):
    """The value network's estimate of a batch of states (no search)."""
    from tempo.memplan.agents import muzero_nets as nets

    return nets.to_scalar(nets.predict(params, nets.represent(params, obs))[1])


_SEARCH = {}


def _compiled_search():
    """The jitted search and value functions, compiled once per process (and cached on disk
    across processes)."""
    if not _SEARCH:
        import jax

        jax.config.update("jax_compilation_cache_dir",
                          os.path.expanduser("~/.cache/tempo-memplan/jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
        _SEARCH["fn"] = jax.jit(_search, static_argnames="config")
        _SEARCH["value"] = jax.jit(_value)
    return _SEARCH["fn"], _SEARCH["value"]


def _root_rewards(item: dict) -> np.ndarray:
    """The root rewards a replay item's search had: the looked-ahead rewards of the moves not
    played and the training reward of the move played."""
    rewards = item["siblings"].copy()
    rewards[item["actions"][0]] = item["reward"][0]
    return rewards


class MuZeroAgent:
    """Self-play, search and learning on one instance."""

    def __init__(self, inst: Instance, config: MuZeroConfig, seed: int):
        import jax

        from tempo.memplan.agents import muzero_nets as nets

        self.jax, self.nets, self.config = jax, nets, config
        self.inst = inst
        self.rng = np.random.default_rng(seed)
        self.params = nets.init_params(seed)
        self.opt = nets.adam_init(self.params)
        self.scale = benefit_scale(inst)
        self.price = config.memory_price * memory_price(inst)
        self.replay = _Replay(config.replay_size)
        self.episodes = [Episode(inst) for _ in range(config.parallel or games_in_flight(inst))]
        self.observer = Observer(self.episodes[0].game)
        self._search, self._value = _compiled_search()

    # ------------------------------------------------------------- search

    @staticmethod
    def _batch(observations: list[dict]) -> dict:
        pad = max(SEARCH_BATCH - len(observations), 0)
        return {k: np.concatenate([np.stack([o[k] for o in observations]),
                                   np.zeros((pad, *SHAPES[k]), np.float32)]) for k in SHAPES}

    def act(self, observations: list[dict], legal: np.ndarray, root_rewards: np.ndarray | None = None):
        """Behaviour distributions, policy targets and root values for a batch of states (the
        search's root rewards from ``root_rewards`` where given and not NaN)."""
        n = len(observations)
        pad = max(SEARCH_BATCH - n, 0)
        invalid = np.concatenate([~legal, np.zeros((pad, 3), bool)])
        given = np.full((n + pad, 3), np.nan, np.float32)
        if root_rewards is not None:
            given[:n] = root_rewards
        out = self._search(self.params, int(self.rng.integers(2 ** 31)),
                           self._batch(observations), invalid, given, config=self.config)
        return tuple(x[:n] for x in self.jax.device_get(out))

    def values(self, observations: list[dict]) -> np.ndarray:
        """The value network's estimates for a batch of states (the root values :meth:`act` gives)."""
        return np.asarray(self._value(self.params, self._batch(observations)))[:len(observations)]

    # ------------------------------------------------------------- learning

    def _record(self, moves: list[_Move], t: int, final: bool) -> dict | None:
        cfg = self.config
        horizon = len(moves)
        if not final and t + cfg.td_steps + cfg.unroll >= horizon:
            return None
        window = np.array([m.reward for m in moves[t:t + cfg.unroll + cfg.td_steps]])
        powers = cfg.discount ** np.arange(cfg.td_steps + 1)
        values, mask = [], []
        for k in range(cfg.unroll + 1):
            i = t + k
            rewards = window[k:k + cfg.td_steps]
            z = float(rewards @ powers[:rewards.size])
            if i + cfg.td_steps < horizon:
                z += powers[-1] * moves[i + cfg.td_steps].value
            values.append(z)
            mask.append(float(i < horizon))
        pad = lambda i, f, d: f(moves[i]) if i < horizon else d  # noqa: E731
        boot = t + cfg.td_steps
        return {
            "obs": moves[t].packed, "legal": moves[t].legal,
            # the root value target is rewards[0] + discount^n * value(boot) (boot None: no bootstrap)
            "rewards0": float(window[:cfg.td_steps] @ powers[:window[:cfg.td_steps].size]),
            "boot": (moves[boot].packed, moves[boot].legal) if boot < horizon else None,
            "actions": np.array([pad(t + k, lambda m: m.action, 0) for k in range(cfg.unroll)]),
            "reward": np.array([pad(t + k, lambda m: m.reward, 0.0) for k in range(cfg.unroll)]),
            "policy": np.stack([pad(t + k, lambda m: m.policy, np.full(3, 1 / 3))
                                for k in range(cfg.unroll + 1)]),
            "value": np.array(values, np.float32), "mask": np.array(mask, np.float32),
            "siblings": moves[t].siblings if moves[t].siblings is not None else _NO_SIBLINGS}

    def _train(self, reanalyse: bool = True) -> None:
        cfg = self.config
        if len(self.replay) < cfg.batch_size:
            return
        picks = self.replay.sample(self.rng, cfg.batch_size)
        if reanalyse:
            picks = self._reanalyse(picks)
        observations = [_observation(p["obs"]) for p in picks]
        obs = {k: np.stack([o[k] for o in observations]) for k in SHAPES}
        batch = {k: np.stack([p[k] for p in picks]) for k in ("actions", "reward", "policy",
                                                              "value", "mask", "siblings")}
        batch["obs"] = obs
        self.params, self.opt, _ = self.nets.train_step(self.params, self.opt, batch,
                                                         cfg.learning_rate)

    def _reanalyse(self, picks: list[dict]) -> list[dict]:
        """Reanalyse (MuZero Reanalyse; Appendix C's reanalyse fraction): for the first
        ``reanalyse`` share of the batch, a fresh search with the current networks gives the root's
        policy target, and the current value of the bootstrap state its n-step value target."""
        cfg = self.config
        n = min(round(cfg.reanalyse * len(picks)), SEARCH_BATCH)
        if n == 0:
            return picks
        fresh = picks[:n]
        _, policy, _ = self.act([_observation(p["obs"]) for p in fresh],
                                np.stack([p["legal"] for p in fresh]),
                                np.stack([_root_rewards(p) for p in fresh]) if cfg.lookahead else None)
        boots = [i for i, p in enumerate(fresh) if p["boot"] is not None]
        bootstrap = np.zeros(n)
        if boots:
            bootstrap[boots] = self.values([_observation(fresh[i]["boot"][0]) for i in boots])
        out = []
        for i, p in enumerate(fresh):
            value = p["value"].copy()
            value[0] = p["rewards0"] + cfg.discount ** cfg.td_steps * bootstrap[i]
            targets = p["policy"].copy()
            targets[0] = policy[i]
            out.append({**p, "policy": targets, "value": value})
        return out + picks[n:]

    # ------------------------------------------------------------- self-play

    def demonstrate(self, tracker: Tracker) -> None:
        """Put the heuristic's game (:mod:`demonstration`) into the replay buffer as demonstration
        transitions, with Monte Carlo value targets and the demonstrator's policy targets, and train
        on it (without Reanalyse) for up to ``demo_steps`` steps or ``demo_share`` of the budget.
        The game is never offered to ``tracker``: the agent's answer is one of its own games."""
        cfg = self.config
        stop = tracker.start + cfg.demo_share * (tracker.deadline - tracker.start)
        demonstrator = Demonstrator(self.inst)
        ep = Episode(self.inst)
        ep.settle()
        while not ep.game.done and time.perf_counter() < stop:
            legal = ep.legal()
            action = demonstrator.action(ep.game.index, legal)
            move, rewound = self._apply(ep, _pack(self.observer(ep.game)), legal, action,
                                        policy_target(action, legal), 0.0)
            if rewound:
                self.replay.demos.append({**self._record([move], 0, final=True), "demo": True})
            ep.settle()
        if not ep.game.done:
            return
        for move, value in zip(ep.moves, returns_to_go([m.reward for m in ep.moves], cfg.discount)):
            move.value = float(value)
        self.replay.demos.extend({**self._record(ep.moves, t, final=True), "demo": True}
                                 for t in range(len(ep.moves)))
        for _ in range(cfg.demo_steps):
            if time.perf_counter() >= stop:
                break
            self._train(reanalyse=False)

    def _apply(self, ep: Episode, packed: tuple, legal: np.ndarray, action: int,
               policy: np.ndarray, value: float,
               looked: np.ndarray | None = None) -> tuple[_Move, bool]:
        """Play ``action`` and the automatic moves after it; the move, and whether it was rewound
        (Drop-backup; otherwise it joins ``ep.moves``). ``looked``: the training rewards of every
        legal action (:meth:`_lookahead`), kept for the actions not played."""
        before, held = ep.game.total, ep.game.reserved
        move = _Move(ep.game.index, packed, legal.copy(), action, 0.0, policy, value)
        if looked is not None:
            move.siblings = looked.copy()
            move.siblings[action] = np.nan
        ep.game.step(action)
        rewound = ep.after_move() or ep.advance()
        move.reward = self._priced(ep.game.total - before, ep.game.reserved - held)
        if not rewound:
            ep.moves.append(move)
        return move, rewound

    def _priced(self, gained: float, reserved: float) -> float:
        """The training reward of a move: return gained less the price of the memory reserved."""
        return (gained - self.price * reserved) / self.scale

    def _lookahead(self, ep: Episode, legal: np.ndarray) -> np.ndarray:
        """The training reward of each legal action, each played and taken back (NaN for illegal
        actions and actions that lose the game)."""
        out = _NO_SIBLINGS.copy()
        for a in np.flatnonzero(legal):
            if (gained := ep.lookahead(int(a))) is not None:
                out[a] = self._priced(*gained)
        return out

    def run(self, tracker: Tracker) -> None:
        """Self-play and learn until the tracker's budget is spent (after the demonstration, if on)."""
        cfg = self.config
        moves_made = 0
        if cfg.demonstrations:
            self.demonstrate(tracker)
        for ep in self.episodes:
            self._settle(ep, tracker)
        while not tracker.out_of_time():
            observations = [self.observer(e.game) for e in self.episodes]
            legal = np.stack([e.legal() for e in self.episodes])
            looked = ([self._lookahead(e, m) for e, m in zip(self.episodes, legal)]
                      if cfg.lookahead else [None] * len(self.episodes))
            behaviour, target, value = self.act(
                observations, legal, np.stack(looked) if cfg.lookahead else None)
            progress = min(tracker.elapsed() / (tracker.deadline - tracker.start), 1.0)
            temperature = cfg.init_temperature + progress * (
                cfg.final_temperature - cfg.init_temperature)
            for i, ep in enumerate(self.episodes):
                p = np.where(legal[i], behaviour[i], 0.0)
                if i < cfg.greedy_actors:
                    action = int(np.argmax(p))
                else:
                    p = (p / p.max()) ** (1 / temperature)
                    action = int(self.rng.choice(3, p=p / p.sum()))
                move, rewound = self._apply(ep, _pack(observations[i]), legal[i], action,
                                            target[i], float(value[i]), looked[i])
                if rewound:
                    self.replay.add(self._record([move], 0, final=True))
                else:
                    self._mature(ep, final=False)
                self._settle(ep, tracker)
            moves_made += len(self.episodes)
            if moves_made % cfg.train_every < len(self.episodes):
                self._train()
        finish_best_in_flight(self.episodes, tracker)

    def _settle(self, ep: Episode, tracker: Tracker) -> None:
        """Bring ``ep`` to a decision point, finishing (and restarting) games that end on the way."""
        ep.settle()
        while ep.game.done:
            self._mature(ep, final=True)
            tracker.offer(ep.game)
            ep.start()
            ep.settle()

    def _mature(self, ep: Episode, final: bool) -> None:
        """Move transitions whose targets are complete into the replay buffer."""
        cfg = self.config
        if final:
            start = max(0, len(ep.moves) - cfg.td_steps - cfg.unroll)
            for t in range(start, len(ep.moves)):
                self.replay.add(self._record(ep.moves, t, final=True))
            return
        t = len(ep.moves) - cfg.td_steps - cfg.unroll - 1
        if t >= 0:
            self.replay.add(self._record(ep.moves, t, final=False))


def solve(inst: Instance, budget_seconds: float, seed: int = 0,
          config: MuZeroConfig = MuZeroConfig()) -> SearchResult:
    """MMap-MuZero self-play for ``budget_seconds``; the best complete game wins."""
    tracker = Tracker(inst, budget_seconds)
    MuZeroAgent(inst, config, seed).run(tracker)
    return tracker.result()

