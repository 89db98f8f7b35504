"""What a rollout training run reports, as CleanRL reports it.

Finished episodes go to ``charts/episodic_return`` and
``charts/episodic_length`` at the global step they ended on; each rollout's
last minibatch's PPO statistics go to ``losses/*``, with
``charts/learning_rate`` and ``charts/SPS`` (environment steps per second
of wall time since the run started). A progress bar counts rollouts, and
:meth:`RunLog.finish` prints the closing line ``episodic_return=<mean of the
last 20 finished episodes> global_step=<steps> sps=<steps per second>``.
"""
from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

from tempo.api.rt import RecurrentTensor
from tempo.api.sinks import sink_many
from tempo.rl.tensorboard import SummaryWriter
from tempo.symbolic.expr import Expr, bound_of

RT = RecurrentTensor
LOSS_TAGS = ("value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac")


class RunLog:
    """Sinks for a rollout program over ``(b, i, t)`` with a rollout at every ``rollout_every``-th ``i``.

    ``logdir``: where the TensorBoard event file goes (None: no file).
    ``first_rollout``: the rollouts an earlier run took (a resumed run's
    global steps count on from there).
    """

    def __init__(self, num_envs: int, num_steps: int, rollouts: int, rollout_every: int, logdir: str | None,
                 desc: str = "PPO", first_rollout: int = 0) -> None:
        self.num_envs, self.num_steps, self.every = num_envs, num_steps, rollout_every
        self.first_rollout = first_rollout
        self.writer = SummaryWriter(logdir) if logdir else None
        self.episodes: list[tuple[int, float, int, float, float]] = []  # (global step, return, length, wall s, CPU s)
        self.losses: list[dict] = []
        self.bar = tqdm(total=rollouts, initial=first_rollout, desc=desc, unit="rollout")
        self.started, self.cpu_started = time.perf_counter(), time.process_time()
        self.global_step = self.first_step = first_rollout * num_steps * num_envs
        self.learning_rate = float("nan")

    def track_episodes(self, episode_return: RT, episode_length: RT, done: RT) -> None:
        """Log every episode that ends in a rollout (read at the rollouts' points only)."""
        b, i, t = done.domain
        at = (i % self.every) == 0
        window = (slice(0, bound_of(b)), i, slice(0, bound_of(t)))
        sink_many({"ret": episode_return[window][at], "len": episode_length[window][at], "done": done[window][at]},
                  self._episodes, label="episodes")

    def track_losses(self, i: Expr, stats: dict[str, RT], learning_rate: RT | float) -> None:
        """Log ``stats`` (tag -> scalar RT) of each rollout's last update, with the learning rate."""
        last = (i % self.every) == self.every - 1
        values = {name: rt[last] for name, rt in stats.items()}
        if isinstance(learning_rate, RT):
            values["learning_rate"] = learning_rate[last]
        else:
            self.learning_rate = float(learning_rate)
        sink_many(values, self._losses, label="losses")

    def start(self) -> None:
        """Start the clocks (call right before ``ctx.run``: compilation counts, as in CleanRL's SPS)."""
        self.started, self.cpu_started = time.perf_counter(), time.process_time()

    def finish(self) -> dict:
        """Close the bar and the event file, print the closing line, return the run's summary."""
        self.bar.close()
        if self.writer is not None:
            self.writer.close()
        seconds, cpu_seconds = time.perf_counter() - self.started, time.process_time() - self.cpu_started
        final = float(np.mean([e[1] for e in self.episodes[-20:]])) if self.episodes else float("nan")
        sps = (self.global_step - self.first_step) / seconds if seconds > 0 else 0.0
        print(f"episodic_return={final:.2f} global_step={self.global_step} sps={sps:.0f}")
        return {"episodic_return": final, "global_step": self.global_step, "sps": sps, "seconds": seconds,
                "cpu_seconds": cpu_seconds, "episodes": [list(e) for e in self.episodes], "losses": self.losses}

    def _episodes(self, tensors: dict, point: dict) -> None:
        rollout = point["i"] // self.every + self.first_rollout
        now, cpu_now = time.perf_counter() - self.started, time.process_time() - self.cpu_started
        for step, env in zip(*np.nonzero(tensors["done"].T)):  # in step order, as the environments ran
            global_step = (rollout * self.num_steps + int(step) + 1) * self.num_envs
            ret, length = float(tensors["ret"][env, step]), int(tensors["len"][env, step])
            self.episodes.append((global_step, ret, length, now, cpu_now))
            if self.writer is not None:
                self.writer.add_scalar("charts/episodic_return", ret, global_step)
                self.writer.add_scalar("charts/episodic_length", length, global_step)
        self.global_step = (rollout + 1) * self.num_steps * self.num_envs
        self.bar.update(1)
        if self.episodes:
            self.bar.set_postfix(episodic_return=f"{np.mean([e[1] for e in self.episodes[-20:]]):.1f}")

    def _losses(self, tensors: dict, point: dict) -> None:
        sps = (self.global_step - self.first_step) / max(time.perf_counter() - self.started, 1e-9)
        row = {"learning_rate": self.learning_rate, **{name: float(value) for name, value in tensors.items()}}
        self.losses.append({"global_step": self.global_step, "sps": sps, **row})
        if self.writer is None:
            return
        self.writer.add_scalar("charts/learning_rate", row.pop("learning_rate"), self.global_step)
        for name, value in row.items():
            self.writer.add_scalar(f"losses/{name}", value, self.global_step)
        self.writer.add_scalar("charts/SPS", int(sps), self.global_step)
