"""benchmarks/decode.py --quick: every part runs, each system decodes, and the tables' files and
plots are written."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 30 s: a subprocess per system, batch and part
def test_quick_run_writes_every_part(tmp_path):
    out = tmp_path / "decode.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--quick", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=600)
    sweep = json.loads(out.read_text())["results"]
    assert {(r["system"], r["attention"]) for r in sweep} == {
        (s, a) for s in ("tempo", "torch", "jax") for a in ("causal", "window 16")}
    assert all(row["tbt_ms"] > 0 for r in sweep for row in r["rows"].values())
    tiles = json.loads((tmp_path / "decode_tiles.json").read_text())
    assert [r["tile"] for r in tiles["results"]] == [None, 16, 64] and tiles["chosen"]["2"]["tile"] >= 16
    compile_rows = json.loads((tmp_path / "decode_compile.json").read_text())["results"]
    assert [r["nodes"] for r in compile_rows] == [compile_rows[0]["nodes"]] * 2  # the same program at 2 and 4 layers
    assert json.loads((tmp_path / "decode_prefill.json").read_text())["results"]
    assert (tmp_path / "decode.png").stat().st_size and (tmp_path / "decode_tiles.png").stat().st_size


@pytest.mark.slow  # about a minute: Tempo on JAX compiles its decoding loop, transformers decodes
def test_quick_masked_run_matches_transformers_tokens(tmp_path):
    """Tempo on JAX (masked attention: the loop over t as one device program) and transformers'
    ``generate`` on the same weights pick the same greedy tokens, and both are timed."""
    out = tmp_path / "decode_jax_transformers.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--quick", "--parts", "sweep",
                    "--attentions", "masked", "--systems", "tempo-jax", "transformers", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert {r["system"] for r in report["results"]} == {"tempo-jax", "transformers"}
    assert all(row["cpu_ms"] > 0 for r in report["results"] for row in r["rows"].values())
    [same] = report["same_tokens"]
    assert same["system"] == "tempo-jax" and same["tokens"] >= 2 * 60 and same["same"] == same["tokens"]
