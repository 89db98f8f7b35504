"""Crash-safe writes: a path holds its old content or all of the new."""
from __future__ import annotations

import json
import os

import pytest

from tempo.files import write_bytes_atomic, write_json_atomic


def test_a_write_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "report.json"
    write_bytes_atomic(path, b"old")
    write_json_atomic(path, {"rows": [1, 2]})
    assert json.loads(path.read_text()) == {"rows": [1, 2]}
    assert os.listdir(tmp_path) == ["report.json"]


def test_a_failed_write_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_json_atomic(path, {"old": True})

    def full_disk(fd):
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="no space"):
        write_json_atomic(path, {"new": True})
    assert json.loads(path.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["report.json"]
