"""Tiny GGUF files written with gguf.GGUFWriter from a transformers model's weights.

The matrices are stored in a chosen GGML type (gguf.quants quantizes BF16,
Q8_0, Q4_0, Q4_1, Q5_0...; Q4_K and Q6_K blocks are random bytes with small
scales, since gguf cannot quantize them), queries and keys permuted as llama.cpp's
converter does. The vocabulary is byte-level BPE (the 256 byte symbols, a few
merges and ChatML's special tokens), with a ChatML chat template.
"""
from __future__ import annotations

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "o w", "he ll", "Ġ w", "e r"]
# per random K-quant block: (bytes, offsets of its float16 scales, their size)
RANDOM_BLOCKS = {"Q4_K": (144, (0, 2), 4e-4), "Q6_K": (210, (208,), 1e-4)}


def vocabulary() -> tuple[list[str], list[int]]:
    """The byte symbols, the merges' results and the special tokens, with their GGUF token types."""
    from tokenizers import pre_tokenizers

    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + [m.replace(" ", "") for m in MERGES] + SPECIAL
    types = [1] * (len(tokens) - len(SPECIAL)) + [3] * len(SPECIAL)
    return tokens, types


# a SentencePiece-style vocabulary (tokenizer.ggml.model "llama"): <unk>, <s>, </s>, the 256 byte
# tokens, then pieces with scores (a higher score merges first); the model's vocabulary is its size
SPM_PIECES = [("▁", -1.0), ("h", -2.0), ("e", -3.0), ("l", -4.0), ("o", -5.0), ("▁h", -6.0),
              ("▁he", -7.0), ("ll", -8.0), ("llo", -9.0), ("▁hello", -10.0)]


def spm_vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and GGUF token types (2 unknown, 3 control, 6 byte, 1 normal) of :data:`SPM_PIECES`."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [p for p, _ in SPM_PIECES]
    scores = [0.0] * 259 + [score for _, score in SPM_PIECES]
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    return tokens, scores, types


def permute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter order of a query or key matrix's rows (what the loader undoes)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def encode(w: np.ndarray, type_name: str, rng) -> tuple[np.ndarray, Q | None]:
    """``w`` (rows, columns) as the GGUF writer takes it in ``type_name``."""
    if type_name == "F32":
        return w.astype(np.float32), None
    if type_name == "F16":
        return w.astype(np.float16), None
    if type_name not in RANDOM_BLOCKS:
        return quants.quantize(w.astype(np.float32), Q[type_name]), Q[type_name]
    size, offsets, scale = RANDOM_BLOCKS[type_name]
    blocks = rng.integers(0, 256, (w.size // 256, size), dtype=np.uint8)
    for at in offsets:
        blocks[:, at:at + 2] = rng.uniform(-scale, scale, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(w.shape[0], -1), Q[type_name]


def write(path, hf_model, type_name: str = "F32", arch: str = "llama", name: str = "tiny llama",
          template: str | None = CHATML, tokenizer: bool | str = True, seed: int = 0,
          head_override=None, embed_type: str = "F32") -> None:
    """``hf_model``'s config and weights as a GGUF file at ``path``, matrices in ``type_name``,
    the embedding in ``embed_type``, norms in F32. ``head_override(head)`` may change the output head.
    ``tokenizer``: True (byte-level BPE), ``"llama"`` (SentencePiece-style: :func:`spm_vocabulary`)
    or False (none)."""
    rng = np.random.default_rng(seed)
    c = hf_model.config
    heads, kv_heads = c.num_attention_heads, c.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(float(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]))
    writer.add_rope_dimension_count(c.hidden_size // heads)
    writer.add_vocab_size(c.vocab_size)
    if tokenizer == "llama":
        tokens, scores, types = spm_vocabulary()
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    elif tokenizer:
        tokens, types = vocabulary()
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(MERGES)
        writer.add_bos_token_id(tokens.index("<|im_start|>"))
        writer.add_eos_token_id(tokens.index("<|endoftext|>"))
    if template is not None:
        writer.add_chat_template(template)
    state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    writer.add_tensor("token_embd.weight", *_tensor(state["model.embed_tokens.weight"], embed_type, rng))
    writer.add_tensor("output_norm.weight", state["model.norm.weight"].astype(np.float32))
    if not c.tie_word_embeddings:
        head = state["lm_head.weight"] if head_override is None else head_override(state["lm_head.weight"].copy())
        writer.add_tensor("output.weight", *_tensor(head, type_name, rng))
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"])
        matrices = {"attn_q": permute_rows(state[p + "self_attn.q_proj.weight"], heads),
                    "attn_k": permute_rows(state[p + "self_attn.k_proj.weight"], kv_heads),
                    "attn_v": state[p + "self_attn.v_proj.weight"], "attn_output": state[p + "self_attn.o_proj.weight"],
                    "ffn_gate": state[p + "mlp.gate_proj.weight"], "ffn_up": state[p + "mlp.up_proj.weight"],
                    "ffn_down": state[p + "mlp.down_proj.weight"]}
        for name, w in matrices.items():
            writer.add_tensor(f"blk.{i}.{name}.weight", *_tensor(w, type_name, rng))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _tensor(w: np.ndarray, type_name: str, rng) -> tuple:
    data, raw = encode(w, type_name, rng)
    return (data,) if raw is None else (data, None, raw)
