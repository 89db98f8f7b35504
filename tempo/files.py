"""Crash-safe file writes shared by checkpoints, solutions, exported models and reports."""
from __future__ import annotations

import json
import os
import tempfile


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old content or all of ``data``.

    The bytes go to a temporary file in the same folder, are fsync'ed, and the
    file is renamed over ``path``; on any failure the temporary file is removed.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, obj: object, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON to ``path`` with :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, json.dumps(obj, indent=indent).encode())
