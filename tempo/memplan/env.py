"""``MMapGame``: the memory-mapping game as a gymnasium environment (MMap-MuZero §4.2)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tempo.memplan.features import SHAPES, Observer
from tempo.memplan.game import GameState
from tempo.memplan.problem import Instance


class MMapGame(gym.Env):
    """One episode decides every buffer of ``instance`` in chronological order.

    Actions: 0 Copy, 1 NoCopy, 2 Drop. ``info["action_mask"]`` marks the legal
    ones. The reward of a move is the benefit of the buffer it places; an
    illegal move, or reaching a state with no legal move, terminates the
    episode with a reward that brings the return to zero (``info["lost"]``).
    The underlying :class:`~tempo.memplan.game.GameState` is ``env.game``.
    """

    metadata = {"render_modes": []}

    def __init__(self, instance: Instance):
        self.game = GameState(instance)
        self.observer = Observer(self.game)
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Dict({
            name: spaces.Box(-np.inf, np.inf, shape, np.float32) for name, shape in SHAPES.items()})

    def _obs(self) -> dict[str, np.ndarray]:
        if self.game.done:
            return {name: np.zeros(shape, np.float32) for name, shape in SHAPES.items()}
        return self.observer(self.game)

    def _info(self) -> dict:
        return {"action_mask": self.game.legal(), "lost": self.game.lost,
                "buffer": self.game.index}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.reset()
        return self._obs(), self._info()

    def step(self, action):
        reward = self.game.step(int(action))
        return self._obs(), float(reward), self.game.done, False, self._info()
