"""Every Python code block of README.md and docs/*.md runs as written.

Each block runs on its own, in a fresh namespace and an empty working folder,
so a block that needs an import or a file must make it itself. A block whose
line before the fence is ``<!-- docs-test: slow -->`` runs only under
``make test-all``.
"""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:^(<!-- docs-test: (\w+) -->)\n)?^```python\n(.*?)^```", re.S | re.M)
MARKS = {"slow": pytest.mark.slow}


def code_blocks(page: pathlib.Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, mark)`` for each Python block of ``page``: its first code line, its text, its mark."""
    text = page.read_text()
    blocks = []
    for match in BLOCK.finditer(text):
        mark = match.group(2)
        if mark is not None and mark not in MARKS:
            raise ValueError(f"{page.name}: unknown docs-test mark {mark!r} (known: {', '.join(MARKS)})")
        line = text.count("\n", 0, match.start(3)) + 1
        blocks.append((line, match.group(3), mark))
    return blocks


def _cases():
    for page in PAGES:
        for line, code, mark in code_blocks(page):
            marks = [MARKS[mark]] if mark else []
            yield pytest.param(page, line, code, id=f"{page.name}:{line}", marks=marks)


@pytest.mark.parametrize("page, line, code", list(_cases()))
def test_code_block_runs(page, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    padded = "\n" * (line - 1) + code  # tracebacks name the page's own line
    exec(compile(padded, str(page), "exec"), {"__name__": "__docs__"})


def test_every_page_with_python_blocks_is_collected():
    assert any(code_blocks(page) for page in PAGES)
    readme = code_blocks(ROOT / "README.md")
    assert len(readme) >= 2 and all(code.strip() for _, code, _ in readme)


def test_a_block_that_fails_names_the_page_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\nraise ValueError(x)\n```\n")
    ((line, code, mark),) = code_blocks(page)
    assert (line, mark) == (4, None)
    with pytest.raises(ValueError) as info:
        exec(compile("\n" * (line - 1) + code, str(page), "exec"), {})
    assert info.traceback[-1].lineno + 1 == 5 and str(info.traceback[-1].path) == str(page)
