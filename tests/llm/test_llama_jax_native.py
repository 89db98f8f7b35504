"""Decoding on JAX with the native products (``tempo.runtime.backends.jax_native``): the weights as
panels and attention's products reading the K/V buffers where they lie give NumPy's tokens and logits."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import jax_native

from test_llama_jax_decoding import decode
from test_llama_parity import PROMPT

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.mark.slow  # JAX compiles the decoding loop: about 10 s on 2 loaded cores
def test_decoding_with_native_products_gives_numpy_tokens_and_logits(tmp_path, monkeypatch):
    if not jax_native.available():
        pytest.skip(jax_native.unavailable())
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=160, hidden_size=128, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                                      eos_token_id=None, bos_token_id=None, pad_token_id=None)
    hf = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    hf.float().eval().save_pretrained(tmp_path)
    model = tpo.llm.Llama.from_pretrained(str(tmp_path))
    new = 80       # buffers of 80 rows of head size 64: the stacked kernels' sizes (rows x 64 >= 4096)
    _, [(first, tokens, logits, _)] = decode(model, PROMPT[:1], "causal", "numpy", (new,))
    traced, stacked = [], jax_native.stacked_product
    monkeypatch.setattr(jax_native, "stacked_product", lambda a, b: traced.append(stacked(a, b)) or traced[-1])
    program, [(got_first, got_tokens, got_logits, _)] = decode(model, PROMPT[:1], "causal", "jax", (new,))
    assert sum(out is not None for out in traced) >= 2          # the keys' and the values' products
    np.testing.assert_array_equal(got_first, first)
    np.testing.assert_array_equal(got_tokens, tokens)
    np.testing.assert_allclose(got_logits, logits, atol=1e-4, rtol=1e-4)
