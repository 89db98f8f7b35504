"""Running as one instance of a ``torchrun`` job (multi-node runs).

Under ``torchrun`` every worker process is one instance: its GMI id is
``RANK``, the world is ``WORLD_SIZE`` (which must match the layout), the
process group comes from torchrun's environment (``env://``), and the
resource share is the ``LOCAL_RANK``-th of this node's ``LOCAL_WORLD_SIZE``
slots. Each node keeps its own host shared memory, so a layout's devices
must not span nodes (MPR needs every instance on one node).
"""
from __future__ import annotations

import os
from dataclasses import replace

from tempo.gmi.errors import GMIError
from tempo.gmi.instance import InstanceSpec, Program, instance_main, trainer_mpl
from tempo.gmi.layout import Layout
from tempo.gmi.resources import choose_backend, plan_shares, probe_gpus


def under_torchrun() -> bool:
    """True in a worker process started by ``torchrun``."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


class LocalReports:
    """Stands in for the manager's queue: reports go straight to a callback."""

    def __init__(self, on_report):
        self.on_report = on_report

    def put(self, event: dict) -> None:
        self.on_report(event)


def run_torchrun_instance(layout: Layout, programs: list[Program], run_dir: str, on_report,
                          backend: str = "auto", timeout_s: float = 120.0,
                          max_threads: int | None = None) -> None:
    """Run this worker's instance of ``layout``; exits the process on failure."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != layout.world_size:
        raise GMIError(f"torchrun started {world} workers but layout {layout} has "
                       f"{layout.world_size} instances")
    local = Layout((int(os.environ.get("LOCAL_WORLD_SIZE", world)),))
    gpus = probe_gpus()
    share = plan_shares(local, choose_backend("train", gpus, backend), gpus)[
        int(os.environ.get("LOCAL_RANK", 0))]
    share = replace(share, gmi_id=rank, device=layout.device_of(rank),
                    threads=min(share.threads, max_threads or share.threads))
    os.makedirs(run_dir, exist_ok=True)
    spec = InstanceSpec(rank, programs[rank], share, layout, run_dir,
                        f"torchrun-{os.environ['TORCHELASTIC_RUN_ID']}", "env://", timeout_s,
                        trainer_mpl(layout, programs))
    instance_main(spec, LocalReports(on_report))
