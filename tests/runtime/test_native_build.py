"""C sources built once per machine: the cached library is named by the source and what it includes."""
from __future__ import annotations

import shutil

import pytest

from tempo.runtime import native


def _source(tmp_path, header_body: str):
    (tmp_path / "part.h").write_text(f"static inline int part(void) {{ return {header_body}; }}\n")
    source = tmp_path / "kernel.c"
    source.write_text('#include "part.h"\nvoid answer(int *out) { *out = part(); }\n')
    return str(source)


def test_a_change_to_an_included_header_names_another_library(tmp_path):
    first = native.library_path(_source(tmp_path, "1"), "cc")
    assert native.library_path(_source(tmp_path, "1"), "cc") == first
    assert native.library_path(_source(tmp_path, "2"), "cc") != first


def test_the_built_library_runs_the_header_s_code(tmp_path, monkeypatch):
    """Built, loaded and called: the header's value, then the changed header's (a new build)."""
    import ctypes

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path / "cache"))
    for value in (7, 8):
        lib = native.load(_source(tmp_path, str(value)), {"answer": [ctypes.c_void_p]})
        out = ctypes.c_int(0)
        lib.answer(ctypes.addressof(out))
        assert out.value == value
