"""Atomic file writes for gmi's run directory, through :func:`tempo.files.write_bytes_atomic`."""
from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from typing import IO

from tempo.files import write_bytes_atomic


def write_atomic(path: str, dump: Callable[[IO], None], mode: str = "w") -> None:
    """Call ``dump(handle)`` on an in-memory file, then write its content over ``path`` atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    buffer = io.BytesIO() if "b" in mode else io.StringIO()
    dump(buffer)
    data = buffer.getvalue()
    write_bytes_atomic(path, data if isinstance(data, bytes) else data.encode())


def write_json(path: str, data) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_atomic(path, lambda handle: json.dump(data, handle, indent=2))
