"""Atomic file writes: write a temporary file, fsync it, then rename over the target."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import IO


def write_atomic(path: str, dump: Callable[[IO], None], mode: str = "w") -> None:
    """Call ``dump(handle)`` on a temporary file next to ``path``, then replace ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, mode) as handle:
        dump(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json(path: str, data) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_atomic(path, lambda handle: json.dump(data, handle, indent=2))
