"""Names of a run's host shared-memory files (no torch here: the manager cleans them up)."""
from __future__ import annotations

import os

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


def shm_path(run_id: str, run_dir: str, name: str) -> str:
    """Where the shared buffer ``name`` of run ``run_id`` lives."""
    return os.path.join(SHM_DIR or run_dir, f"tempo-gmi-{run_id}-{name}")


def remove_shared(run_id: str, run_dir: str) -> None:
    """Delete the shared-memory files of a run."""
    directory = SHM_DIR or run_dir
    prefix = f"tempo-gmi-{run_id}-"
    for name in os.listdir(directory):
        if name.startswith(prefix):
            os.remove(os.path.join(directory, name))
