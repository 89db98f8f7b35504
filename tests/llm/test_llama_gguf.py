"""GGUF files: dequantisation against gguf's, loading against transformers' GGUF loader, bad files."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import quants as gguf_quants

import tempo as tpo
from tempo.errors import TempoError
from tempo.llm import quants

import tiny_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = np.array([[5, 17, 99, 3, 42, 7], [11, 0, 150, 64, 8, 23]], np.int64)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]


def hf_tiny(kind: str = "llama", seed: int = 0, **options):
    """A transformers model with 265 tokens (tiny_gguf's vocabulary) and inputs of 256 (a K-quant block)."""
    torch.manual_seed(seed)
    sizes = dict(dict(vocab_size=len(tiny_gguf.vocabulary()[0]), hidden_size=256, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=None, bos_token_id=None, pad_token_id=None), **options)
    cls = transformers.MistralForCausalLM if kind == "mistral" else transformers.LlamaForCausalLM
    config = (transformers.MistralConfig if kind == "mistral" else transformers.LlamaConfig)(**sizes)
    model = cls(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.1)
    return model.float().eval()


def random_blocks(type_name: str, count: int, rng) -> np.ndarray:
    """``count`` blocks of random bytes whose float16 scales are small finite numbers."""
    per, size, _ = quants.FORMATS[type_name]
    blocks = rng.integers(0, 256, (count, size), dtype=np.uint8)
    offsets = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q4_K": (0, 2), "Q6_K": (208,)}[type_name]
    for at in offsets:
        blocks[:, at:at + 2] = rng.uniform(-1, 1, (count, 1)).astype(np.float16).view(np.uint8)
    return blocks


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"])
def test_block_dequantisation_equals_gguf_s(type_name):
    rng = np.random.default_rng(1)
    per = quants.FORMATS[type_name][0]
    raw = random_blocks(type_name, 48, rng).reshape(6, -1)          # 6 rows of 8 blocks
    ours = quants.dequantize(raw, type_name, 8 * per)
    np.testing.assert_array_equal(ours, gguf_quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]))


@pytest.mark.parametrize("type_name", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
def test_dequantising_gguf_s_quantisation_comes_back_close(type_name):
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    raw = gguf_quants.quantize(x, gguf.GGMLQuantizationType[type_name])
    ours = quants.dequantize(raw, type_name, 64)
    np.testing.assert_array_equal(ours, gguf_quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]))
    assert np.abs(ours - x).max() < {"F16": 1e-2, "BF16": 3e-2, "Q8_0": 3e-2}.get(type_name, 0.5)


def hf_from_gguf(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32)
    return model.eval()


def greedy(model, prompt: np.ndarray, new: int) -> np.ndarray:
    with torch.no_grad():
        return model.generate(torch.tensor(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                              attention_mask=torch.ones(prompt.shape, dtype=torch.long)).numpy()


def logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


FAST_TYPES = ("F32", "Q8_0", "Q4_K")     # the others are marked slow: about 5 s each here


@pytest.mark.parametrize("type_name, kind, options", [
    *[pytest.param(t, "llama", {}, marks=() if t in FAST_TYPES else pytest.mark.slow) for t in TYPES],
    ("Q8_0", "mistral", {}),
    ("Q4_1", "llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    ("F32", "llama", dict(num_key_value_heads=4)),
])
def test_gguf_decoding_matches_transformers_gguf_loader(tmp_path, type_name, kind, options):
    """Greedy tokens equal and logits within 1e-4 of transformers' model loaded from the same file
    (a tied embedding stored in the matrices' type)."""
    path = tmp_path / "model.gguf"
    embed_type = type_name if options.get("tie_word_embeddings") else "F32"
    tiny_gguf.write(path, hf_tiny(kind, **options), type_name, name=f"tiny {kind}", embed_type=embed_type)
    model = tpo.llm.Llama.from_pretrained(str(path))
    reference = hf_from_gguf(path)
    assert model.config.model_type == kind and model.config.num_kv_heads == reference.config.num_key_value_heads
    expected = greedy(reference, PROMPT, 12)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=12), expected)
    np.testing.assert_allclose(model.logits(expected), logits(reference, expected), atol=1e-4, rtol=1e-4)


def test_f32_gguf_holds_the_original_weights(tmp_path):
    """Queries and keys unpermuted: the F32 file's model is the source model, to float32 rounding."""
    source = hf_tiny()
    tiny_gguf.write(tmp_path / "m.gguf", source, "F32")
    model = tpo.llm.Llama.from_pretrained(str(tmp_path / "m.gguf"))
    wq = source.model.layers[1].self_attn.q_proj.weight.detach().numpy()
    wk = source.model.layers[1].self_attn.k_proj.weight.detach().numpy()
    np.testing.assert_array_equal(model.weights.matrices("wq")[1], wq.T)
    np.testing.assert_array_equal(model.weights.matrices("wk")[1], wk.T)
    np.testing.assert_allclose(model.logits(PROMPT), logits(source, PROMPT), atol=1e-4, rtol=1e-4)


def test_gguf_tokenizer_is_the_embedded_bpe_vocabulary(tmp_path):
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), "Q8_0")
    model = tpo.llm.Llama.from_pretrained(str(path))
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    text = "hello world, <|im_start|>user\nwhere hello<|im_end|>"
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == reference.encode(text, add_special_tokens=False)
    tokens, _ = tiny_gguf.vocabulary()
    assert tokens.index("<|im_start|>") in ids and tokens.index("hell") in ids
    assert model.tokenizer.decode(ids, skip_special_tokens=False) == text


def write_bytes(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def test_bad_gguf_files_are_tempo_errors_naming_the_problem(tmp_path):
    good = tmp_path / "good.gguf"
    tiny_gguf.write(good, hf_tiny(), "Q8_0")
    data = good.read_bytes()
    cases = {
        write_bytes(tmp_path / "cut.gguf", data[:len(data) - 1000]): "truncated",
        write_bytes(tmp_path / "cut_header.gguf", data[:300]): "truncated",
        write_bytes(tmp_path / "text.gguf", b"not a gguf file at all"): "not GGUF",
        str(tmp_path / "missing.gguf"): "does not exist",
    }
    arch = tmp_path / "arch.gguf"
    tiny_gguf.write(arch, hf_tiny(), "F16", arch="gpt2")
    cases[str(arch)] = "unsupported architecture general.architecture='gpt2'"
    q5 = tmp_path / "q5.gguf"
    tiny_gguf.write(q5, hf_tiny(), "Q5_0")
    cases[str(q5)] = "unsupported quantisation type Q5_0"
    for path, message in cases.items():
        with pytest.raises(TempoError, match=message):
            tpo.llm.Llama.from_pretrained(path)


def test_a_gguf_file_without_vocabulary_decodes_ids_and_refuses_text(tmp_path, capsys):
    from tempo.cli import main

    path = tmp_path / "bare.gguf"
    tiny_gguf.write(path, hf_tiny(), "Q4_0", tokenizer=False, template=None)
    model = tpo.llm.Llama.from_pretrained(str(path))
    assert model.tokenizer is None and model.generate([[1, 2, 3]], max_new_tokens=3).shape == (1, 6)
    with pytest.raises(TempoError, match="no chat template"):
        model.chat([{"role": "user", "content": "hi"}])
    assert main(["generate", "--model", str(path), "--prompt", "hello"]) == 1
    assert "has no tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["hello hello", "hello world", " hello", "hellö héllo, ¿ok?", "say </s> then <s>hello",
                                  "two  spaces\nand a line"])
def test_gguf_sentencepiece_tokenizer_encodes_as_transformers(tmp_path, text):
    """A llama (SentencePiece-style) vocabulary with scores and byte tokens: the pieces its
    scores merge, bytes for what it lacks, control tokens whole, a space before the text."""
    tokens, _, _ = tiny_gguf.spm_vocabulary()
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(vocab_size=len(tokens)), "F32", tokenizer="llama", template=None)
    model = tpo.llm.Llama.from_pretrained(str(path))
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == reference.encode(text, add_special_tokens=False)
    assert model.tokenizer.decode(ids, skip_special_tokens=False) == reference.decode(ids)
    assert model.tokenizer.encode(text).ids == reference.encode(text) == [tokens.index("<s>")] + ids
    if text == "hello hello":
        assert ids == [tokens.index("\u2581hello")] * 2
    if "ö" in text:
        assert tokens.index("<0xC3>") in ids


def test_gguf_tokenizer_without_scores_or_merges_or_of_another_model_is_an_error(tmp_path):
    from tempo.llm.tokenizer import gguf_tokenizer

    tokens, _, types = tiny_gguf.spm_vocabulary()
    with pytest.raises(TempoError, match="tokenizer.ggml.scores"):
        gguf_tokenizer({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.model": "llama",
                        "tokenizer.ggml.token_type": types}, "m.gguf")
    with pytest.raises(TempoError, match="unsupported tokenizer tokenizer.ggml.model='t5'"):
        gguf_tokenizer({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.model": "t5"}, "m.gguf")
