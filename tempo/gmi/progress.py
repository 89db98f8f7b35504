"""Training progress from the instances' reports: steps per second and mean return."""
from __future__ import annotations

import time
from collections import deque


class Progress:
    """Accumulates ``progress`` reports; prints a line at most every ``interval`` seconds."""

    def __init__(self, interval: float = 1.0, window: int = 50, echo=print):
        self.interval, self.echo = interval, echo
        self.steps = 0
        self.returns: deque[float] = deque(maxlen=window)
        self.episodes = 0
        self.first_start: float | None = None
        self.last_time: float | None = None
        self.max_rss_mb = 0.0
        self.busy = 0.0  # instance-seconds of iterations
        self.comm = 0.0  # of which reducing gradients
        self.trained = 0  # samples trainers consumed (asynchronous training)
        self.trainers: set[int] = set()
        self._printed = time.time()

    def __call__(self, event: dict) -> None:
        if event.get("kind") == "done":
            self.max_rss_mb = max(self.max_rss_mb, event["max_rss_mb"])
        if event.get("kind") == "trained":
            self.trained += event["samples"]
            self.trainers.add(event["gmi"])
        if event.get("kind") != "progress":
            return
        self.steps += event["steps"]
        self.busy += event["seconds"]
        self.comm += event.get("comm_seconds", 0.0)
        self.returns.extend(event["returns"])
        self.episodes += event.get("episodes", len(event["returns"]))
        start = event["started"]
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_time = event["time"] if self.last_time is None else max(self.last_time, event["time"])
        if time.time() - self._printed >= self.interval:
            self._printed = time.time()
            self.echo(self.line())

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds(self) -> float:
        """From the first instance's start to the last report."""
        if self.first_start is None:
            return 0.0
        return max(0.0, self.last_time - self.first_start)

    @property
    def mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def line(self) -> str:
        elapsed = self.seconds
        mean = "n/a" if self.mean_return is None else f"{self.mean_return:8.2f}"
        trained = f"  trained={self.trained}" if self.trained else ""
        if self.comm:
            trained += f"  comm={100 * self.comm / self.busy:4.1f}%"
        return (f"t={elapsed:6.1f}s  steps={self.steps:8d}  steps/s={self.steps_per_second:9.0f}  "
                f"mean return={mean}  episodes={self.episodes}{trained}")

    def summary(self) -> dict:
        return {"steps": self.steps, "seconds": self.seconds,
                "steps_per_second": self.steps_per_second,
                "mean_return": self.mean_return, "episodes": self.episodes,
                "max_rss_mb": self.max_rss_mb, "trained_samples": self.trained,
                "trainers_used": len(self.trainers),
                "comm_fraction": self.comm / self.busy if self.busy else 0.0}
