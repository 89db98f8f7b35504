"""What runs inside one instance process.

The entry point applies the instance's resource share before torch is imported
(so thread counts and core sets hold for torch's pools), then builds the
instance's role and runs it. Any exception is written to the run directory so
the manager can report the instance's exit cause.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass, field

from tempo.gmi.atomic import write_atomic
from tempo.gmi.layout import Layout
from tempo.gmi.resources import ResourceShare

# routine name -> "module:Class" of its Role subclass, imported in the instance only
ROUTINES = {
    "bench-reduce": "tempo.gmi.bench_reduce:ReduceBench",
    "ppo": "tempo.gmi.ppo_roles:HolisticPPO",
    "a3c-agent": "tempo.gmi.a3c:A3CAgent",
    "a3c-trainer": "tempo.gmi.a3c:A3CTrainer",
    "tempo": "tempo.gmi.tempo_program:TempoProgram",
}

# the DRL roles an instance can hold (Listing 1)
ROLE_KINDS = ("simulator", "agent", "trainer")


@dataclass(frozen=True)
class Program:
    """What one instance runs: a routine, the DRL roles it holds, its options.

    ``routine`` names a built-in routine (a key of ``ROUTINES``) or is a
    :class:`~tempo.gmi.roles.Role` subclass importable by the instances.
    """

    routine: str | type
    kinds: tuple[str, ...]
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class InstanceSpec:
    """Everything an instance process needs; plain data so spawn can pickle it."""

    gmi_id: int
    program: Program
    share: ResourceShare
    layout: Layout
    run_dir: str
    run_id: str
    init_method: str
    timeout_s: float
    reduce_mpl: tuple[tuple[int, ...], ...]  # the trainer instances per device

    def describe(self) -> str:
        return (f"instance {self.gmi_id} ({'+'.join(self.program.kinds)}, "
                f"{routine_name(self.program.routine)}, device {self.share.device})")


def trainer_mpl(layout: Layout, programs: list[Program]) -> tuple[tuple[int, ...], ...]:
    """The instances holding the trainer role, per device (devices without one left out)."""
    groups = (tuple(i for i in ids if "trainer" in programs[i].kinds) for ids in layout.mpl)
    return tuple(ids for ids in groups if ids)


def error_path(run_dir: str, gmi_id: int) -> str:
    return os.path.join(run_dir, f"instance-{gmi_id}.error")


def load_routine(routine: str | type) -> type:
    """The Role subclass a program runs."""
    if isinstance(routine, type):
        return routine
    module, _, cls = ROUTINES[routine].partition(":")
    return getattr(importlib.import_module(module), cls)


def routine_name(routine: str | type) -> str:
    return routine if isinstance(routine, str) else routine.__name__


def instance_main(spec: InstanceSpec, reports) -> None:
    """Entry point of an instance process (the target given to spawn)."""
    spec.share.apply()
    try:
        import torch

        torch.set_num_threads(spec.share.threads)
        from tempo.gmi.comm import GMIContext

        ctx = GMIContext(spec, reports)
        load_routine(spec.program.routine)(ctx, **spec.program.options).run()
        ctx.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the manager, then exit 1
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" at {os.path.basename(last[0].filename)}:{last[0].lineno}" if last else ""
        message = f"{type(exc).__name__}: {exc}{where}"
        write_atomic(error_path(spec.run_dir, spec.gmi_id), lambda handle: handle.write(message))
        sys.stderr.flush()
        os._exit(1)

