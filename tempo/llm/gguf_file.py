"""GGUF files (the llama.cpp format): config, tokenizer and weights of a Llama-family model.

Read with the ``gguf`` package's memory-mapped reader. The config comes from
the ``{arch}.*`` metadata, the tokenizer from ``tokenizer.ggml.*`` (a byte-level
BPE vocabulary with its merges), the weights from the tensors, dequantised with
:mod:`tempo.llm.quants` or kept quantised (:mod:`tempo.llm.quantized`).
llama.cpp stores the query and key rows of each head interleaved for its rope
(the two halves of a head's rotation pairs side by side); :func:`unpermute_rows`
puts them back in the Hugging Face order.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError
from tempo.llm.config import LlamaConfig
from tempo.llm.quants import check_type, dequantize

ARCHITECTURES = ("llama", "mistral")
# GGUF tensor name (after "blk.{i}.") -> Hugging Face name (after "model.layers.{i}.")
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


@dataclass(frozen=True)
class Tensor:
    """One tensor of a GGUF file: its GGML type name, its shape in NumPy order (rows, columns)
    and its raw data (float arrays for F32/F16, the bytes (rows, bytes per row) otherwise), read
    from the file only when :meth:`to_float32` is called. ``heads``: the heads of a query or key
    matrix whose rows are in llama.cpp's rope order (:func:`unpermute_rows`), None otherwise.
    ``kept``: the matrix stays quantised (its products are computed from ``raw``)."""

    type_name: str
    shape: tuple
    raw: np.ndarray
    heads: int | None = None
    kept: bool = False

    def to_float32(self, source: str) -> np.ndarray:
        """The tensor's values as float32 in its NumPy shape (rows in the Hugging Face order)."""
        value = dequantize(self.raw, self.type_name, self.shape[-1], source).reshape(self.shape)
        return value if self.heads is None else unpermute_rows(value, self.heads)


@dataclass(frozen=True)
class GGUFFile:
    """The metadata (key -> value) and tensors (GGUF name -> :class:`Tensor`) of one file."""

    path: str
    metadata: dict
    tensors: dict

    @classmethod
    def read(cls, path: str) -> "GGUFFile":
        """Open ``path``; a missing, truncated or malformed file is a TempoError."""
        if not os.path.isfile(path):
            raise TempoError(f"GGUF file {path!r} does not exist")
        from gguf import GGUFReader

        try:
            reader = GGUFReader(path)
        except Exception as err:  # the reader raises ValueError, IndexError, struct errors...
            size = os.path.getsize(path)
            raise TempoError(f"{path}: unreadable GGUF file of {size} bytes: truncated or not GGUF "
                             f"({type(err).__name__}: {err})") from None
        metadata = {name: _field_value(field) for name, field in reader.fields.items()
                    if not name.startswith("GGUF.")}
        tensors = {}
        for t in reader.tensors:
            shape = tuple(int(n) for n in reversed(t.shape.tolist()))
            tensors[t.name] = Tensor(t.tensor_type.name, shape, t.data)
        return cls(path, metadata, tensors)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def architecture(self) -> str:
        """``general.architecture``, checked: ``llama`` (Mistral files use it too) or ``mistral``."""
        arch = self.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise TempoError(f"{self.path}: unsupported architecture general.architecture={arch!r}; "
                             f"supported: {', '.join(ARCHITECTURES)}")
        return arch


def _field_value(field):
    value = field.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


def read_config(f: GGUFFile) -> LlamaConfig:
    """The model's config from the ``{arch}.*`` metadata (and the tensors, for the vocabulary and
    whether the output head is tied to the embedding)."""
    arch = f.architecture()
    key = lambda name: f.get(f"{arch}.{name}")  # noqa: E731
    embed = f.tensors.get("token_embd.weight")
    vocab = key("vocab_size") or (embed.shape[0] if embed is not None else None)
    raw = {"model_type": "mistral" if arch == "mistral" or "mistral" in str(f.get("general.name", "")).lower()
           else "llama",
           "vocab_size": vocab, "hidden_size": key("embedding_length"),
           "intermediate_size": key("feed_forward_length"), "num_hidden_layers": key("block_count"),
           "num_attention_heads": key("attention.head_count"),
           "num_key_value_heads": key("attention.head_count_kv"),
           "head_dim": key("attention.key_length") or key("rope.dimension_count"),
           "max_position_embeddings": key("context_length") or 2048,
           "rms_norm_eps": key("attention.layer_norm_rms_epsilon") or 1e-5,
           "rope_theta": key("rope.freq_base") or 10000.0,
           "tie_word_embeddings": "output.weight" not in f.tensors,
           "sliding_window": key("attention.sliding_window"),
           "eos_token_id": f.get("tokenizer.ggml.eos_token_id"),
           "pad_token_id": f.get("tokenizer.ggml.padding_token_id")}
    if key("rope.scaling.type") not in (None, "none"):
        raise TempoError(f"{f.path}: unsupported rope scaling {key('rope.scaling.type')!r}")
    return LlamaConfig.from_dict({k: v for k, v in raw.items() if v is not None}, f.path)


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rope permutation of a query or key matrix's rows (``heads`` heads): in
    the file each head's rows are (pairs, 2) where Hugging Face has (2, pairs)."""
    rest = w.shape[1:]
    pairs = w.shape[0] // heads // 2
    return w.reshape(heads, pairs, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(f: GGUFFile, config: LlamaConfig, keep=lambda name, tensor: False) -> dict:
    """The tensors under their Hugging Face names, as :class:`Tensor` s: where ``keep(hf_name,
    tensor)`` holds, its raw data with the query and key rows unpermuted (a matrix kept quantised);
    otherwise the file's tensor, dequantised and unpermuted by ``to_float32`` when it is read (one
    tensor's float32 values at a time, never the whole file's)."""
    out = {}
    for name, tensor in f.tensors.items():
        hf = _hf_name(name)
        if hf is None:
            continue
        check_type(tensor.type_name, f"{f.path}: tensor {name!r}")
        heads = config.num_heads if ".attn_q." in name else config.num_kv_heads if ".attn_k." in name else None
        if keep(hf, tensor):
            raw = tensor.raw if heads is None else unpermute_rows(tensor.raw, heads)
            out[hf] = Tensor(tensor.type_name, tensor.shape, raw, kept=True)
            continue
        out[hf] = Tensor(tensor.type_name, tensor.shape, tensor.raw, heads)
    return out


def _hf_name(name: str) -> str | None:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
    return None
