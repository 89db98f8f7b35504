"""Greedy decoding and logits of tpo.llm.Llama against transformers' Llama and Mistral."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.sampling import Sampling

PROMPT = np.array([[5, 17, 99, 3, 42, 7], [11, 0, 150, 64, 8, 23]], np.int64)


def hf_greedy(model, prompt: np.ndarray, new: int) -> np.ndarray:
    with torch.no_grad():
        out = model.generate(torch.tensor(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             attention_mask=torch.ones(prompt.shape, dtype=torch.long))
    return out.numpy()


def hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize("variant", ["llama", "llama_gqa", "llama3_rope_tied", "mistral_window"])
def test_greedy_tokens_and_logits_match_transformers(checkpoint, variant, backend="numpy"):
    folder, hf = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    expected = hf_greedy(hf, PROMPT, 32)
    got = model.generate(PROMPT, max_new_tokens=32, backend=backend)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(model.logits(expected, backend=backend), hf_logits(hf, expected),
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", ["llama_gqa", "mistral_window"])
def test_decoding_steps_logits_match_transformers(checkpoint, variant):
    """The logits of the decoding steps (after the prompt's batched prefill; the window masks
    the prompt's rows as decoding moves past them) are transformers' at those positions."""
    folder, hf = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    new = 12
    ids = hf_greedy(hf, PROMPT, new)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, PROMPT, model.default_attention(), Sampling())
        (logits,) = ctx.run(bounds=dp.bounds(model.config.num_layers, new), fetch=[dp.logits])
    assert logits.shape[0] == new - 1               # a step per token after the first; the last enters none
    np.testing.assert_allclose(logits.transpose(1, 0, 2), hf_logits(hf, ids)[:, 6:6 + new - 1],
                               atol=1e-4, rtol=1e-4)


def test_window_matters(checkpoint):
    """The Mistral checkpoint's window changes its logits: causal attention does not reproduce them."""
    folder, hf = checkpoint("mistral_window")
    model = tpo.llm.Llama.from_pretrained(folder)
    ids = hf_greedy(hf, PROMPT, 12)
    causal = model.logits(ids, attention="causal")
    assert np.abs(causal - hf_logits(hf, ids)).max() > 1e-2
    np.testing.assert_allclose(model.logits(ids, attention=("window", 6)), hf_logits(hf, ids), atol=1e-4,
                               rtol=1e-4)


@pytest.mark.slow      # a tiled program compiled per tile size
@pytest.mark.parametrize("tile", [4, 7, 64])
def test_statically_tiled_causal_attention_matches_transformers(checkpoint, tile):
    """Causal attention in tiles of a static size (the last one padded and masked) gives
    transformers' tokens and logits, whether or not the tile size divides the length."""
    folder, hf = checkpoint("llama_gqa")
    model = tpo.llm.Llama.from_pretrained(folder)
    expected = hf_greedy(hf, PROMPT, 32)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=32, attention=("tiled", tile)), expected)
    np.testing.assert_allclose(model.logits(expected, attention=f"tiled:{tile}"), hf_logits(hf, expected),
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant, backend", [
    ("mistral_window", "torch"),
    pytest.param("llama3_rope_tied", "torch", marks=pytest.mark.slow),
    pytest.param("mistral_window", "jax", marks=pytest.mark.slow),
    pytest.param("llama3_rope_tied", "jax", marks=pytest.mark.slow),
])
def test_other_backends_match_transformers(checkpoint, variant, backend):
    """The same program on the torch and JAX backends (slow ones: compiling for them takes longer)."""
    pytest.importorskip(backend)
    folder, hf = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    expected = hf_greedy(hf, PROMPT, 32)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=32, backend=backend), expected)
    np.testing.assert_allclose(model.logits(expected, backend=backend), hf_logits(hf, expected),
                               atol=1e-4, rtol=1e-4)
