"""Loading: sharded checkpoints, and stopping at an end-of-sequence token as transformers does."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import tempo as tpo

PROMPT = np.array([[5, 17, 99], [11, 0, 150]], np.int64)


def test_sharded_checkpoint_loads_like_a_single_file(checkpoint):
    folder, hf = checkpoint("llama_gqa", max_shard_size="20KB")
    assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        assert len(set(json.load(f)["weight_map"].values())) > 1
    ids = tpo.llm.Llama.from_pretrained(folder).generate(PROMPT, max_new_tokens=8)
    with torch.no_grad():
        expected = hf.generate(torch.tensor(PROMPT), max_new_tokens=8, do_sample=False,
                               attention_mask=torch.ones(PROMPT.shape, dtype=torch.long)).numpy()
    np.testing.assert_array_equal(ids, expected)


def test_generation_stops_at_eos_like_transformers(checkpoint):
    folder, hf = checkpoint("llama")
    free = tpo.llm.Llama.from_pretrained(folder).generate(PROMPT, max_new_tokens=24)
    eos = int(free[0, 3 + 4])                    # the first sequence's fifth new token ends it
    pad = 1 if eos != 1 else 2
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config.update(eos_token_id=eos, pad_token_id=pad)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    ids = tpo.llm.Llama.from_pretrained(folder).generate(PROMPT, max_new_tokens=24)
    with torch.no_grad():
        expected = hf.generate(torch.tensor(PROMPT), max_new_tokens=24, do_sample=False, eos_token_id=eos,
                               pad_token_id=pad, attention_mask=torch.ones(PROMPT.shape, dtype=torch.long)).numpy()
    np.testing.assert_array_equal(ids, expected)
    assert ids[0, 3 + 4] == eos and (ids[0, 3 + 5:] == pad).all()


def test_bfloat16_and_float16_checkpoints_load_as_float32(checkpoint):
    folder, hf = checkpoint("llama_gqa")
    reference = tpo.llm.Llama.from_pretrained(folder)
    for dtype in (torch.bfloat16, torch.float16):
        hf.to(dtype).save_pretrained(folder)
        model = tpo.llm.Llama.from_pretrained(folder)
        expected = hf.model.embed_tokens.weight.detach().float().numpy()
        np.testing.assert_array_equal(model.weights.embedding(np.arange(len(expected))), expected)
        np.testing.assert_allclose(model.weights.matrices("wq"), reference.weights.matrices("wq"), rtol=1e-2, atol=1e-2)


def test_a_truncated_file_is_a_tempo_error(checkpoint):
    folder, _ = checkpoint("llama")
    path = os.path.join(folder, "model.safetensors")
    size = os.path.getsize(path)
    for keep in (20, size - 100):                 # inside the header, inside the last tensor
        with open(path, "r+b") as f:
            f.truncate(keep)
        with pytest.raises(tpo.TempoError, match="unreadable safetensors file"):
            tpo.llm.Llama.from_pretrained(folder)
