"""One self-play game with Drop-backup (§4.3.2) and automatic moves.

Drop-backup: the episode keeps a backup, the latest prefix after which no
alias group placed in fast memory has undecided buffers, so dropping
everything after it completes the game. When a move leads to a lost state,
the game is rewound to the backup and the alias group of the buffer that could
not be placed is forced to Drop from then on.

Automatic moves are the ones that need no decision: a buffer with exactly one
legal action, and a NoCopy that reuses an allocation already covering the
buffer's use (no new memory, no copy, outside any alias group: it earns the
benefit at no cost, so it dominates Copy and Drop). Agents search only at the
other states, the decision points.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tempo.memplan.agents.base import Tracker
from tempo.memplan.game import NOCOPY, GameState
from tempo.memplan.problem import Instance


class Episode:
    """A game on ``inst`` with its backup (and the return there), forced drops and the agent's moves.

    ``moves`` is the agent's trajectory; each move has the ``index`` of the buffer it decided.
    """

    def __init__(self, inst: Instance):
        self.game = GameState(inst)
        self.start()

    def start(self) -> None:
        """A fresh game (forced drops forgotten)."""
        self.game.reset()
        self.backup, self.backup_total, self.forced, self.moves = 0, 0.0, set(), []

    def legal(self) -> np.ndarray:
        """Legal actions of the current buffer, Drop only when its alias group is forced to Drop."""
        mask = self.game.legal()
        if self.game.current.alias_id in self.forced:
            mask = np.array([False, False, True])
        return mask

    def automatic(self) -> int | None:
        """The action to play without a decision (forced, or a free NoCopy), or None."""
        legal = self.legal()
        if legal.sum() == 1:
            return int(np.flatnonzero(legal)[0])
        reuse = self.game.options()[NOCOPY]
        if legal[NOCOPY] and reuse.interval is None and self.game.current.alias_id is None:
            return NOCOPY
        return None

    def lookahead(self, action: int) -> tuple[float, float] | None:
        """What ``action`` and the automatic moves after it would add to the game's return and to its
        reserved fast memory (bytes x steps), found by playing them and taking them back; None when
        they lose the game."""
        game = self.game
        total, reserved = game.total, game.reserved
        game.step(action)
        moves = 1
        while not game.done and not game.lost:
            auto = self.automatic()
            if auto is None:
                break
            game.step(auto)
            moves += 1
        gained = None if game.lost else (game.total - total, game.reserved - reserved)
        for _ in range(moves + int(game.lost)):
            game.undo()
        game.total, game.reserved = total, reserved   # no float drift over thousands of lookaheads
        return gained

    def after_move(self) -> bool:
        """Apply Drop-backup after a move; returns True when it rewound the game."""
        game = self.game
        if game.lost:
            stuck = game.buffers[game.index].alias_id
            game.rewind(self.backup)
            self.forced.add(stuck)
            while self.moves and self.moves[-1].index >= self.backup:
                self.moves.pop()
            return True
        if game.can_drop_rest():
            self.backup, self.backup_total = game.index, game.total
        return False

    def advance(self) -> bool:
        """Play automatic moves until a decision point or the end; True when Drop-backup rewound the game."""
        while not self.game.done:
            action = self.automatic()
            if action is None:
                return False
            self.game.step(action)
            if self.after_move():
                return True
        return False

    def settle(self) -> None:
        """Advance to the next decision point or the end, through any rewinds."""
        while self.advance():
            pass

    def play(self, choose: Callable[[], int]) -> None:
        """Play a fresh game to its end; ``choose()`` picks the action at each decision point."""
        self.start()
        self.settle()
        while not self.game.done:
            self.game.step(choose())
            self.after_move()
            self.settle()

    def finish_from_backup(self) -> None:
        """Complete the game: rewind to the backup and drop everything after it."""
        self.game.rewind(self.backup)
        self.game.drop_rest()


def finish_best_in_flight(episodes: list[Episode], tracker: Tracker) -> None:
    """At the deadline, complete the game in flight with the best backup (by Drop from there).

    Only when its backup beats the best complete game so far; the others are left as they are.
    """
    started = [ep for ep in episodes if ep.game.index > 0]
    if not started:
        return
    best = max(started, key=lambda ep: ep.backup_total)
    if tracker.best is None or best.backup_total > tracker.best.reward:
        best.finish_from_backup()
        tracker.offer(best.game)
