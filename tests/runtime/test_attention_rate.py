"""A decoding step's native attention (``attend_steps`` of ``numpy_attention.c``, through
:func:`tempo.runtime.backends.numpy_attention.step`) for every number of groups and head size it takes,
over whole blocks of 16 keys and a tail, against the softmax in float64; and
``benchmarks/decode_attention_rate.py`` on a short run."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tempo.runtime.backends import numpy_attention as na

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lib():
    if na.library() is None:
        pytest.skip(na.unavailable())
    return na.library()


def reference(q, keys, values, prompt_scores, prompt_values, scale):
    """softmax over the keys' scores and the prompt's, times the values, in float64."""
    scores = np.concatenate([scale * q.astype(np.float64) @ np.swapaxes(keys, -1, -2), prompt_scores], -1)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    rows = np.concatenate([values, np.broadcast_to(prompt_values, values.shape[:2] + prompt_values.shape[2:])], -2)
    return (weights @ rows.astype(np.float64)) / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("groups", [1, 2, 3, 4])
@pytest.mark.parametrize("depth", [16, 32, 48, 64])
def test_every_group_count_and_head_size_is_the_softmax(lib, groups, depth):
    """40 keys: two blocks of 16 (each row's vectors shared by the groups, the lanes added as the rows
    come) and a tail of 8; the keys and values in rows with room for more, as a block store holds them."""
    rng = np.random.default_rng(groups * 100 + depth)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    batch, heads, length = 2, 3, 40
    q = normal(batch, heads, groups, depth)
    keys, values = (normal(batch, heads, length + 24, depth)[:, :, :length] for _ in "kv")
    prompt_scores, prompt_values = normal(batch, heads, groups, 2), normal(1, heads, 2, depth)
    out = na.step(q, [(None, keys, values), (prompt_scores, None, prompt_values)], 0.125)
    expected = reference(q, keys, values, prompt_scores, prompt_values, 0.125)
    np.testing.assert_allclose(out, expected, rtol=0, atol=2e-6 * np.abs(values).max())


def test_each_row_score_lands_in_its_own_column(lib):
    """One key of 16 in a block matches the query (the others are 0): all the weight on its value row,
    whichever row of the block it is."""
    depth, groups = 64, 3
    for row in range(16):
        keys = np.zeros((1, 1, 16, depth), np.float32)
        keys[0, 0, row] = 1.0
        values = np.arange(16 * depth, dtype=np.float32).reshape(1, 1, 16, depth)
        q = np.full((1, 1, groups, depth), 50.0, np.float32)
        out = na.step(q, [(None, keys, values)], 1.0)
        np.testing.assert_allclose(out[0, 0], np.broadcast_to(values[0, 0, row], (groups, depth)), rtol=1e-6)


def test_a_short_run_of_the_benchmark_writes_its_rows(lib, tmp_path):
    out = tmp_path / "decode_attention_rate.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_attention_rate.py"), "--batch", "1",
                    "--lengths", "64", "--passes", "1", "--between", "0", "2", "--huge-pages", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["between_mb"], r["way"], r["huge_pages"]) for r in rows] == [
        (between, way, True) for between in (0, 2) for way in ("attention", "plain read")]
    assert all(r["cpu_ms"] > 0 and r["gb"] == pytest.approx(30 * 2 * 3 * 64 * 64 * 4 / 1e9) for r in rows)
