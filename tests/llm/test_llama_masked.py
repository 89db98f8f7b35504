"""Masked causal attention: decoding's keys and values in buffers of a fixed number of rows
carried from step to step (the same shapes at every step), against transformers and NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.sampling import Sampling

from test_llama_parity import PROMPT, hf_greedy, hf_logits


def test_masked_attention_matches_transformers(checkpoint):
    folder, hf = checkpoint("llama_gqa")
    model = tpo.llm.Llama.from_pretrained(folder)
    expected = hf_greedy(hf, PROMPT, 16)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=16, attention="masked"), expected)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, PROMPT, Attention(masked=True), Sampling(), capacity=16)
        (logits,) = ctx.run(bounds=dp.bounds(model.config.num_layers, 16), fetch=[dp.logits])
    np.testing.assert_allclose(logits[:15].transpose(1, 0, 2), hf_logits(hf, expected)[:, 6:6 + 15],
                               atol=1e-4, rtol=1e-4)


def test_every_decoding_node_has_static_shapes():
    """What lets a compiling backend compile each island once: no size depends on ``t``."""
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                                 num_heads=2, num_kv_heads=1, head_dim=8, max_positions=64)
    model = tpo.llm.Llama.random(config)
    for attention, static in ((Attention(masked=True), True), (Attention(), False)):
        with tpo.Context() as ctx:
            dp = program_mod.build(config, model.weights, np.array([[1, 2]]), attention, Sampling(), capacity=8)
            t = dp.positions[0]
            steps = [node for node in ctx.sdg.nodes.values() if t in node.domain]
            sizes = [s for node in steps for shape in node.shapes for s in shape]
            assert all(isinstance(s, int) for s in sizes) == static


@pytest.mark.slow      # the JAX backend compiles every island of the program
def test_masked_attention_on_jax_gives_numpy_tokens_token_for_token():
    config = tpo.llm.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                                 num_heads=4, num_kv_heads=2, head_dim=8, max_positions=64)
    model = tpo.llm.Llama.random(config, seed=3)
    prompt = np.array([[1, 2, 3], [7, 8, 9]])
    expected = model.generate(prompt, 20, attention="causal")
    np.testing.assert_array_equal(model.generate(prompt, 20, attention="masked"), expected)
    np.testing.assert_array_equal(model.generate(prompt, 20, attention="masked", backend="jax"), expected)


def test_masked_attention_needs_a_capacity():
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                                 num_heads=2, num_kv_heads=1, head_dim=8, max_positions=64)
    with tpo.Context(), pytest.raises(TempoError, match="capacity"):
        program_mod.build(config, tpo.llm.Llama.random(config).weights, np.array([[1]]), Attention(masked=True),
                          Sampling())
