"""Channel-based experience sharing (section 4.2) between agent and trainer instances.

* :class:`Dispenser` (one per agent) splits each rollout into channels
  (observations, actions, returns).
* :class:`Compressor` batches each channel until it holds ``rows`` samples, so
  transfers are few and large instead of many and small.
* :class:`Migrator` sends a full batch, channel by channel, to the trainer
  with the least outstanding work, read from a load table in host shared
  memory (agent ``a`` writes only ``sent[a, :]``, trainer ``t`` only ``done[t, :]``).
* :class:`ExperienceService` runs the three for one agent on a background
  thread, so the agent keeps simulating while its experience is sent.
* :func:`receive` is the trainer's batcher: it takes the next batch from any
  agent. A batch of zero rows means that agent has finished.
"""
from __future__ import annotations

import queue
import threading

import torch

from tempo.gmi.comm import GMIContext

# channel -> (dtype, trailing shape is per-sample); the order is the wire order
CHANNELS = {"obs": torch.float32, "actions": torch.int64, "returns": torch.float32}
HEADER_TAG = 0


class Dispenser:
    """Splits experience into one stream per channel."""

    def split(self, experience: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {name: experience[name].to(dtype) for name, dtype in CHANNELS.items()}


class Compressor:
    """Concatenates each channel's pieces until a batch of ``rows`` samples is ready."""

    def __init__(self, rows: int):
        self.rows = rows
        self.pieces: dict[str, list[torch.Tensor]] = {name: [] for name in CHANNELS}

    def push(self, channels: dict[str, torch.Tensor]) -> None:
        for name, tensor in channels.items():
            self.pieces[name].append(tensor)

    @property
    def pending(self) -> int:
        return sum(piece.shape[0] for piece in self.pieces["actions"])

    def ready(self) -> bool:
        return self.pending >= self.rows

    def flush(self) -> dict[str, torch.Tensor]:
        batch = {name: torch.cat(pieces) for name, pieces in self.pieces.items()}
        self.pieces = {name: [] for name in CHANNELS}
        return batch


class LoadTable:
    """Batches sent by each agent to each trainer (``sent[a, t]``), and batches each
    trainer finished per agent (``done[t, a]``)."""

    def __init__(self, agents: list[int], trainers: list[int], sent: torch.Tensor,
                 done: torch.Tensor):
        self.agents, self.trainers, self.sent, self.done = agents, trainers, sent, done

    @classmethod
    def shared(cls, ctx: GMIContext, agents: list[int], trainers: list[int]) -> "LoadTable":
        """The run's table, in host shared memory."""
        a, t = len(agents), len(trainers)
        return cls(agents, trainers, ctx.shared("a3c-sent", a * t, torch.float64).view(a, t),
                   ctx.shared("a3c-done", t * a, torch.float64).view(t, a))

    def outstanding(self) -> torch.Tensor:
        """Per trainer: batches sent to it and not yet trained on."""
        return self.sent.sum(0) - self.done.sum(1)

    def least_loaded(self) -> int:
        """Column of the trainer with the fewest outstanding batches (lowest on ties)."""
        return int(torch.argmin(self.outstanding()))


class Migrator:
    """Routes an agent's batches to the least-loaded trainer."""

    def __init__(self, ctx: GMIContext, table: LoadTable):
        self.ctx, self.table = ctx, table
        self.row = table.agents.index(ctx.gmi_id)

    def send(self, batch: dict[str, torch.Tensor]) -> int:
        """Send ``batch``; returns the trainer it went to."""
        column = self.table.least_loaded()
        trainer = self.table.trainers[column]
        self.table.sent[self.row, column] += 1
        self.ctx.send(torch.tensor([batch["actions"].shape[0]]), trainer, HEADER_TAG)
        for tag, name in enumerate(CHANNELS, start=1):
            self.ctx.send(batch[name].contiguous(), trainer, tag)
        return trainer

    def finish(self) -> None:
        """Tell every trainer this agent is done."""
        for trainer in self.table.trainers:
            self.ctx.send(torch.tensor([0]), trainer, HEADER_TAG)


class ExperienceService:
    """An agent's dispenser, compressor and migrator, serving on a background thread.

    ``submit`` hands a rollout over (waiting while ``depth`` are queued);
    ``close`` sends what makes full batches, tells the trainers this agent is
    done, and re-raises any error of the sending thread.
    """

    def __init__(self, migrator: Migrator, rows: int, depth: int = 4):
        self.migrator, self.rows = migrator, rows
        self.pending: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, name="experience-service", daemon=True)
        self.thread.start()

    def submit(self, experience: dict[str, torch.Tensor]) -> None:
        self._put(experience)

    def close(self) -> None:
        self._put(None)
        self.thread.join()
        self._raise()
        self.migrator.finish()

    def _put(self, item) -> None:
        while True:
            self._raise()
            try:
                self.pending.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _serve(self) -> None:
        dispenser, compressor = Dispenser(), Compressor(self.rows)
        try:
            while (experience := self.pending.get()) is not None:
                compressor.push(dispenser.split(experience))
                if compressor.ready():
                    self.migrator.send(compressor.flush())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the agent's thread
            self.error = exc


def receive(ctx: GMIContext, obs_shape: tuple[int, ...]) -> tuple[int, dict[str, torch.Tensor]]:
    """The next batch from any agent: (sender, channels); empty channels when it finished."""
    header = torch.zeros(1, dtype=torch.int64)
    sender = ctx.recv(header, None, HEADER_TAG)
    rows = int(header.item())
    if rows == 0:
        return sender, {}
    batch = {}
    for tag, (name, dtype) in enumerate(CHANNELS.items(), start=1):
        shape = (rows, *obs_shape) if name == "obs" else (rows,)
        batch[name] = torch.empty(shape, dtype=dtype)
        ctx.recv(batch[name], sender, tag)
    return sender, batch
