"""Bad checkpoints, prompts and options are TempoErrors that say what is wrong."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tempo as tpo


def edit_tensors(folder: str, fn) -> None:
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path)


def edit_config(folder: str, **changes) -> None:
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)


def test_missing_tensor_is_named(checkpoint):
    folder, _ = checkpoint("llama")
    edit_tensors(folder, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(tpo.TempoError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        tpo.llm.Llama.from_pretrained(folder)


def test_misshaped_tensor_is_named(checkpoint):
    folder, _ = checkpoint("llama_gqa")
    edit_tensors(folder, lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": np.zeros((8, 32), np.float32)}))
    with pytest.raises(tpo.TempoError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \(8, 32\), "
                                             r"expected \(16, 32\)"):
        tpo.llm.Llama.from_pretrained(folder)


def test_unsupported_architecture(checkpoint):
    folder, _ = checkpoint("llama")
    edit_config(folder, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(tpo.TempoError, match=r"unsupported architecture model_type='gpt2' \(GPT2LMHeadModel\)"):
        tpo.llm.Llama.from_pretrained(folder)


def test_missing_folder_and_files(tmp_path):
    with pytest.raises(tpo.TempoError, match="does not exist"):
        tpo.llm.Llama.from_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(tpo.TempoError, match="no config.json"):
        tpo.llm.Llama.from_pretrained(str(tmp_path))


@pytest.mark.parametrize("spec", ["sliding", ("window", 0), ("window", "x"), "window:", ("causal", 2)])
def test_unknown_attention_spec(checkpoint, spec):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    with pytest.raises(tpo.TempoError, match="unknown attention spec"):
        model.generate([1, 2], max_new_tokens=2, attention=spec)


def test_prompt_longer_than_the_model(checkpoint):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    with pytest.raises(tpo.TempoError, match="longer than the model's maximum of 256 positions"):
        model.generate(np.ones((1, 250), np.int64), max_new_tokens=10)
    with pytest.raises(tpo.TempoError, match="longer than the model's maximum"):
        model.logits(np.ones((1, 300), np.int64))


@pytest.mark.parametrize("bad", [160, -1])
def test_token_outside_the_vocabulary(checkpoint, bad):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    with pytest.raises(tpo.TempoError, match=rf"token id {bad} is outside the vocabulary \(0\.\.159\)"):
        model.generate([[1, bad, 3]], max_new_tokens=2)


@pytest.mark.parametrize("options, message", [(dict(temperature=0.0), "temperature"), (dict(top_k=0), "top_k"),
                                              (dict(top_p=1.5), "top_p"), (dict(max_new_tokens=-1), "max_new_tokens")])
def test_bad_sampling_options(checkpoint, options, message):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    with pytest.raises(tpo.TempoError, match=message):
        model.generate([[1, 2]], **{"max_new_tokens": 2, "do_sample": True, **options})
