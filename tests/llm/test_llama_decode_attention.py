"""A decoding step's attention on NumPy: one native call per layer for every (sequence, head)
pair (``numpy_attention.step``, through the island's attention line), against the same program with
the attention's steps run one by one."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.sampling import Sampling
from tempo.llm.weights import Weights
from tempo.runtime.backends import numpy_attention, numpy_fused

CONFIG = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, max_positions=256)
STEPS = 12


def logits(prompt: np.ndarray, attention: Attention) -> np.ndarray:
    with tpo.Context() as ctx:
        dp = program_mod.build(CONFIG, Weights.random(CONFIG, 1), prompt, attention, Sampling(), capacity=STEPS)
        program = ctx.compile(fetch=[dp.logits], passes=program_mod.compile_passes(dp, None, STEPS))
    (out,) = program.run(dp.bounds(CONFIG.num_layers, STEPS))
    return out


@pytest.fixture
def calls(monkeypatch):
    if numpy_attention.library() is None:
        pytest.skip(numpy_attention.unavailable())
    seen = []
    real = numpy_attention.step
    monkeypatch.setattr(numpy_attention, "step", lambda *args: seen.append(args[0].shape) or real(*args))
    return seen


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("prompt_len", [1, 5])
def test_causal_decoding_attention_is_one_call_a_layer(calls, monkeypatch, batch, prompt_len):
    prompt = np.random.default_rng(batch).integers(0, CONFIG.vocab_size, (batch, prompt_len))
    fused = logits(prompt, Attention())
    assert calls == [(batch, 2, 2, 16)] * (CONFIG.num_layers * (STEPS - 1))
    monkeypatch.setattr(numpy_fused, "_attention_steps", lambda op, call_of: {})
    plain = logits(prompt, Attention())
    np.testing.assert_allclose(fused, plain, rtol=0, atol=2e-5 * np.abs(plain).max())


@pytest.mark.parametrize("attention", [Attention(window=3), Attention(masked=True), Attention(tile=4)], ids=str)
def test_other_attentions_give_their_steps_numbers(calls, monkeypatch, attention):
    """Window attention (its prompt scores masked before the island: given scores) and masked
    attention (the step's scores through a ``where``: given scores beside the prompt's keys) are
    attention lines too; tiled attention (a softmax over tiles) is not. Each gives the logits of its
    steps run one by one."""
    prompt = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    fused = logits(prompt, attention)
    assert bool(calls) == (attention.tile is None)
    monkeypatch.setattr(numpy_fused, "_attention_steps", lambda op, call_of: {})
    plain = logits(prompt, attention)
    np.testing.assert_allclose(fused, plain, rtol=0, atol=2e-5 * np.abs(plain).max())
