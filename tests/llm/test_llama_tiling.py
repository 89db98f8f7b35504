"""Static tiling of causal attention: tiles of a static size, the last one padded and masked,
against the softmax over the whole prefix."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.llm.tiling import CANDIDATES, TOLERANCE, choose_tile, tiled_attention


def reference(q, k, v, scale):
    out = []
    for t in range(len(q)):
        s = np.einsum("bkgd,sbkd->bkgs", q[t], k[:t + 1]) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        out.append(np.einsum("bkgs,sbkd->bkgd", p / p.sum(-1, keepdims=True), v[:t + 1]))
    return np.array(out)


@pytest.mark.parametrize("size", [1, 4, 5, 16])
def test_tiled_attention_is_the_softmax_over_the_prefix(size):
    rng = np.random.default_rng(size)
    length, batch, heads, groups, dim = 11, 2, 2, 3, 4
    q = rng.normal(size=(length, batch, heads, groups, dim)).astype(np.float32)
    k = rng.normal(size=(length, batch, heads, dim)).astype(np.float32)
    v = rng.normal(size=(length, batch, heads, dim)).astype(np.float32)
    with tpo.Context() as ctx:
        (l, L), (t, T), (n, N) = ctx.dims("l", "t", "n")
        rts = [tpo.from_numpy(x[None], dims=(l, t)) for x in (q, k, v)]
        out = tiled_attention(*rts, l, t, n, size, 0.5)
        per_tile = [node for node in ctx.sdg.nodes.values() if n in node.domain]
        assert per_tile and all(isinstance(s, int) for node in per_tile for shape in node.shapes for s in shape)
        (got,) = ctx.run(bounds={L: 1, T: length, N: -(-length // size)}, fetch=[out])
    np.testing.assert_allclose(got[0], reference(q, k, v, 0.5), rtol=1e-5, atol=1e-6)


def test_choose_tile_measures_the_candidates_and_takes_the_smallest_near_the_fastest():
    choice = choose_tile(2, 2, 3, 4, 20, candidates=(4, 8, 16, 64))
    assert set(choice.seconds) == {4, 8, 16}                     # 64 is not below twice the length
    fastest = min(choice.seconds.values())
    assert choice.seconds[choice.tile] <= fastest * (1 + TOLERANCE)
    assert all(s > fastest * (1 + TOLERANCE) for z, s in choice.seconds.items() if z < choice.tile)
    assert str(choice).startswith(f"tiled:{choice.tile}, the smallest tile")


@pytest.mark.slow      # a tiled program compiled per case, with the micro-runs that choose a tile
def test_attention_tiled_without_a_size_measures_one_and_decodes_as_untiled(checkpoint):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama_gqa")[0])
    prompt = np.array([[5, 17, 99], [11, 0, 150]], np.int64)
    tiled = model.generate(prompt, max_new_tokens=20, attention="tiled")
    np.testing.assert_array_equal(tiled, model.generate(prompt, max_new_tokens=20, attention="causal"))
    choice = model.tile_choices[("numpy", 2, 20)]
    assert choice.tile in CANDIDATES and choice.tile == model.tile_for(2, 20).tile    # measured once
    assert set(choice.seconds) == {16, 32}
