"""Small helpers shared by the training examples: a CLI from a dataclass, and a progress report."""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
from tqdm import tqdm

from tempo.api.rt import RecurrentTensor
from tempo.api.sinks import sink
from tempo.errors import TempoError


def parse_args(args_type, description: str = ""):
    """An instance of the dataclass ``args_type`` from ``--field value`` command-line flags."""
    parser = argparse.ArgumentParser(description=description)
    for f in dataclasses.fields(args_type):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return args_type(**vars(parser.parse_args()))


class ReturnReport:
    """A progress bar of the mean episode return per iteration, and the closing summary line.

    With ``every=k`` only the points of ``mean_return``'s dim that are
    multiples of ``k`` count as iterations (e.g. PPO's batches of k updates).
    """

    def __init__(self, mean_return: RecurrentTensor, iterations: int, desc: str, batch: int = 0,
                 steps: int = 0, every: int = 1) -> None:
        self.returns: list[float] = []
        self.times: list[float] = []  # when each iteration's return arrived
        self.batch, self.steps = batch, steps  # episodes per iteration, steps per episode
        if every < 1:
            raise TempoError(f"ReturnReport(every=...) must be >= 1, got {every}")
        self.every = every
        self.bar = tqdm(total=iterations, desc=desc, unit="it")
        sink(mean_return, self._update)

    def _update(self, value, point) -> None:
        if any(step % self.every for step in point.values()):
            return
        self.returns.append(float(value))
        self.times.append(time.perf_counter())
        self.bar.update(1)
        self.bar.set_postfix(mean_return=f"{float(value):.1f}")

    def start(self) -> None:
        self.started = time.perf_counter()

    def finish(self) -> dict:
        """Close the bar, print ``mean_return=<last 5 mean> iterations=<n> seconds=<s>``, return them.

        The summary also has every iteration's mean return, the episodes run
        (``batch`` per iteration), the environment steps (``steps`` each) and
        ``seconds_per_iteration``, the median time between iterations (the
        steady state: compilation and the first iteration left out).
        """
        seconds = time.perf_counter() - self.started
        self.bar.close()
        final = float(np.mean(self.returns[-5:]))
        print(f"mean_return={final:.1f} iterations={len(self.returns)} seconds={seconds:.1f}")
        return {"mean_return": final, "iterations": len(self.returns), "seconds": seconds, "returns": self.returns,
                "seconds_per_iteration": float(np.median(np.diff(self.times))) if len(self.times) > 1 else seconds,
                "episodes": self.batch * len(self.returns),
                "steps": self.batch * self.steps * len(self.returns)}
