"""Every file in docs/results is cited by a doc, and every docs/results path a doc cites exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
CITED = re.compile(r"(?<![\w/])(?:docs/)?(results/[\w./*-]*\w)")
SIBLING = re.compile(r"(?<![\w/])(?:docs/)?(results/[\w./-]+)\.json`?\s+and\s+`(\.\w+)`")  # x.json and `.png`


def _docs() -> str:
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _cited(text: str) -> set[str]:
    """Paths relative to docs/ that ``text`` cites, globs expanded; a path without a suffix is the
    stem a command writes its files to (``--out docs/results/rl_learning_cartpole``)."""
    out = set()
    for path in CITED.findall(text):
        pattern = path if "*" in path else path + ".*" if "." not in path.rsplit("/", 1)[-1] else None
        found = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").glob(pattern)} if pattern else set()
        out |= found or {path}
    out |= {stem + ext for stem, ext in SIBLING.findall(text)}
    return out


def test_every_results_file_is_cited():
    cited = _cited(_docs())
    files = {str(p.relative_to(ROOT / "docs")) for p in RESULTS.rglob("*") if p.is_file()}
    assert files, "docs/results holds no files"
    assert files <= cited, sorted(files - cited)


def test_every_cited_results_path_exists():
    missing = sorted(p for p in _cited(_docs()) if not (ROOT / "docs" / p).exists())
    assert not missing, missing


def test_the_citation_patterns_read_what_the_docs_write():
    text = ("see `docs/results/a.json` and `.png`, [b](results/sub/b.json), benchmarks/results/c.json "
            "and docs/results/d_*.json, written by --out docs/results/e")
    assert _cited(text) >= {"results/a.json", "results/a.png", "results/sub/b.json", "results/e"}
    assert not any(p.startswith("results/c") for p in _cited(text))
