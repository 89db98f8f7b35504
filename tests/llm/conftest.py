"""Tiny random-weight Llama and Mistral checkpoints, written with transformers into a temp folder."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=256)

VARIANTS = {
    "llama": dict(num_key_value_heads=4),
    "llama_gqa": dict(num_key_value_heads=2),
    "llama3_rope_tied": dict(num_key_value_heads=1, tie_word_embeddings=True,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                             rope_theta=500000.0),
    "mistral_window": dict(num_key_value_heads=2, sliding_window=6),
}


def hf_model(variant: str, seed: int = 0):
    """A transformers model of ``variant`` with random float32 weights, in eval mode."""
    torch.manual_seed(seed)
    options = dict(SIZES, **VARIANTS[variant], eos_token_id=None, bos_token_id=None, pad_token_id=None)
    if variant.startswith("mistral"):
        config = transformers.MistralConfig(**options)
        model = transformers.MistralForCausalLM(config)
    else:
        config = transformers.LlamaConfig(**options)
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():      # larger weights than the default init, so that logits differ clearly
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model.float().eval()


@pytest.fixture
def checkpoint(tmp_path):
    """``checkpoint(variant)``: (folder, the transformers model saved in it)."""

    def make(variant: str, seed: int = 0, **save):
        model = hf_model(variant, seed)
        folder = tmp_path / variant
        model.save_pretrained(folder, **save)
        return str(folder), model

    return make


def write_tokenizer(folder, vocab_size: int) -> list[str]:
    """A word-level ``tokenizer.json`` in ``folder``: token ``i`` is the word ``w{i}``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = [f"w{i}" for i in range(vocab_size)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.save(str(folder / "tokenizer.json") if hasattr(folder, "joinpath") else f"{folder}/tokenizer.json")
    return words
