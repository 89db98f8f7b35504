"""Crash-safe file writes shared by checkpoints, solutions, exported models and reports."""
from __future__ import annotations

import json
import os
import tempfile


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old content or all of ``data``.

    The bytes go to a temporary file in the same folder, are fsync'ed, and the
    file is renamed over ``path``; on any failure the temporary file is removed.
    The file gets the mode a plain ``open(path, "wb")`` would give it: the
    old file's mode when it replaces one, else ``0o666`` less the umask.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        os.fchmod(fd, _plain_open_mode(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _plain_open_mode(path: str) -> int:
    """The permission bits ``open(path, "w")`` leaves ``path`` with (mkstemp's own are 0o600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_json_atomic(path: str | os.PathLike, obj: object, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON to ``path`` with :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, json.dumps(obj, indent=indent).encode())
