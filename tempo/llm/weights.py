"""A Llama checkpoint's tensors: read from safetensors files, checked, stacked per layer."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from tempo.errors import TempoError
from tempo.llm.config import LlamaConfig
from tempo.llm.gguf_file import GGUFFile, Tensor, hf_tensors
from tempo.llm.quantized import TYPES as QUANTIZED_TYPES, QuantizedMatrices

# per-layer tensor -> (Hugging Face name inside model.layers.{i}, shape from the config)
LAYER_TENSORS = {
    "input_norm": ("input_layernorm.weight", lambda c: (c.hidden_size,)),
    "wq": ("self_attn.q_proj.weight", lambda c: (c.num_heads * c.head_dim, c.hidden_size)),
    "wk": ("self_attn.k_proj.weight", lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size)),
    "wv": ("self_attn.v_proj.weight", lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size)),
    "wo": ("self_attn.o_proj.weight", lambda c: (c.hidden_size, c.num_heads * c.head_dim)),
    "post_norm": ("post_attention_layernorm.weight", lambda c: (c.hidden_size,)),
    "w_gate": ("mlp.gate_proj.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "w_up": ("mlp.up_proj.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "w_down": ("mlp.down_proj.weight", lambda c: (c.hidden_size, c.intermediate_size)),
}
# the matrices, stored (in, out) so that the model computes x @ w
TRANSPOSED = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"}


@dataclass(frozen=True)
class Weights:
    """``embed`` (V, D), ``head`` (D, V), ``final_norm`` (D,), and ``layers``: name -> array
    stacked over the layers (leading axis L), matrices as (in, out). A matrix kept quantised
    (the head, or a layer matrix) is a :class:`tempo.llm.quantized.QuantizedMatrices` instead,
    (out, in) per layer (the head: one layer)."""

    embed: np.ndarray
    head: np.ndarray
    final_norm: np.ndarray
    layers: dict[str, np.ndarray]

    @classmethod
    def from_tensors(cls, tensors: dict, config: LlamaConfig, source: str = "checkpoint"):
        """Pick, check and stack the tensors a Llama needs from ``tensors`` (Hugging Face names:
        arrays, memory-mapped or not, or GGUF :class:`Tensor` s). Each float32 array is written
        once, straight into its stack over the layers (one tensor's values converted at a time),
        and made read-only, so that a program holds it as it is (``tpo.from_numpy``); a tied
        output head is the embedding's transpose, not a copy."""
        c = config

        def take(name: str, shape: tuple):
            if name not in tensors:
                raise TempoError(f"{source}: missing tensor {name!r}")
            value = tensors[name]
            if tuple(value.shape) != shape:
                raise TempoError(f"{source}: tensor {name!r} has shape {tuple(value.shape)}, expected {shape}")
            return value

        def values(name: str, value) -> np.ndarray:
            return value.to_float32(f"{source}: tensor {name!r}") if isinstance(value, Tensor) else value

        def owned(name: str, value, transpose: bool = False) -> np.ndarray:
            value = values(name, value)
            array = np.empty(value.shape[::-1] if transpose else value.shape, np.float32)
            array[...] = value.T if transpose else value     # a copy: never a view of the mapped file
            return frozen(array)

        embed_tensor = take("model.embed_tokens.weight", (c.vocab_size, c.hidden_size))
        tied = c.tie_word_embeddings and "lm_head.weight" not in tensors
        head = embed_tensor if tied else take("lm_head.weight", (c.vocab_size, c.hidden_size))
        embed = owned("model.embed_tokens.weight", embed_tensor)  # the lookup reads rows: no product to compute
        if isinstance(head, Tensor) and head.kept:
            head = QuantizedMatrices.from_raw(head.type_name, [head.raw], c.vocab_size, c.hidden_size)
        elif tied:
            head = embed.T                                      # (D, V): the embedding's bytes, read transposed
        else:
            head = owned("lm_head.weight", head, transpose=True)
        layers = {}
        for key, (name, shape) in LAYER_TENSORS.items():
            names = [f"model.layers.{i}.{name}" for i in range(c.num_layers)]
            parts = [take(n, shape(c)) for n in names]
            kinds = {v.type_name if isinstance(v, Tensor) and v.kept else None for v in parts}
            if len(kinds) == 1 and kinds <= set(QUANTIZED_TYPES):       # one quantised type in every layer
                layers[key] = QuantizedMatrices.from_raw(parts[0].type_name, [v.raw for v in parts], *shape(c))
                continue
            layer_shape = shape(c)[::-1] if key in TRANSPOSED else shape(c)
            stacked = np.empty((c.num_layers, *layer_shape), np.float32)
            for i, (n, v) in enumerate(zip(names, parts)):
                value = values(n, v)
                stacked[i] = value.T if key in TRANSPOSED else value
            layers[key] = frozen(stacked)
        final_norm = owned("model.norm.weight", take("model.norm.weight", (c.hidden_size,)))
        return cls(embed=embed, head=head, final_norm=final_norm, layers=layers)

    @classmethod
    def random(cls, config: LlamaConfig, seed: int = 0) -> "Weights":
        """Random weights (normal, scaled by ``1/sqrt(fan in)``; norms one), e.g. to benchmark a size."""
        rng = np.random.default_rng(seed)

        def normal(shape: tuple) -> np.ndarray:
            return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

        c = config
        tensors = {"model.embed_tokens.weight": normal((c.vocab_size, c.hidden_size)),
                   "lm_head.weight": normal((c.vocab_size, c.hidden_size)),
                   "model.norm.weight": np.ones(c.hidden_size, np.float32)}
        for i in range(c.num_layers):
            for name, shape in LAYER_TENSORS.values():
                shape = shape(c)
                tensors[f"model.layers.{i}.{name}"] = np.ones(shape, np.float32) if len(shape) == 1 else normal(shape)
        return cls.from_tensors(tensors, config, "random weights")

    def bytes_per_token(self) -> int:
        """The bytes of weights one decoding step reads: every layer matrix (its quantised bytes and
        scales where it is kept quantised), the norms, the output head and one embedding row."""
        total = self.final_norm.nbytes + self.embed.nbytes // len(self.embed)
        for value in [self.head, *self.layers.values()]:
            total += value.nbytes_per_layer * value.num_layers if isinstance(value, QuantizedMatrices) else value.nbytes
        return total

    @classmethod
    def from_gguf(cls, f: GGUFFile, config: LlamaConfig, quantized: bool = False) -> "Weights":
        """The tensors of a GGUF file, dequantised to float32; with ``quantized``, the layers'
        matrices of a type in :data:`tempo.llm.quantized.TYPES` (the same in every layer) stay
        quantised."""
        def keep(name: str, tensor: Tensor) -> bool:
            matrix = name.endswith("_proj.weight") or name in ("model.embed_tokens.weight", "lm_head.weight")
            return quantized and tensor.type_name in QUANTIZED_TYPES and matrix

        return cls.from_tensors(hf_tensors(f, config, keep), config, f.path)

    @classmethod
    def from_folder(cls, folder: str, config: LlamaConfig) -> "Weights":
        """Read ``model.safetensors`` or the shards ``model.safetensors.index.json`` lists."""
        return cls.from_tensors(read_safetensors(folder), config, folder)


def frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (the weights are never written after loading)."""
    array.flags.writeable = False
    return array


def read_safetensors(folder: str) -> dict:
    """Every tensor of the checkpoint in ``folder`` (one file or shards named by the index)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f).get("weight_map", {}).values()))
        if not files:
            raise TempoError(f"{index}: empty weight_map")
    elif os.path.exists(single):
        files = ["model.safetensors"]
    else:
        raise TempoError(f"no model.safetensors or model.safetensors.index.json in {folder}")
    tensors = {}
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise TempoError(f"{path}: shard listed in the index is missing")
        tensors.update(read_file(path))
    return tensors


# safetensors dtype -> NumPy dtype; BF16 is read as its 16 bits and widened to float32
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_file(path: str) -> dict:
    """The tensors of one safetensors file (memory-mapped), bfloat16 ones as GGUF-style
    :class:`Tensor` s of their 16 bits, widened to float32 when they are read."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    except (OSError, ValueError) as err:
        raise TempoError(f"{path}: unreadable safetensors file ({err})") from None
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info.get("dtype") not in DTYPES:
            raise TempoError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')}")
        start, stop = info["data_offsets"]
        try:
            array = data[start:stop].view(DTYPES[info["dtype"]]).reshape(info["shape"])
        except ValueError as err:
            raise TempoError(f"{path}: unreadable safetensors file (tensor {name!r}: {err})") from None
        tensors[name] = Tensor("BF16", tuple(array.shape), array) if info["dtype"] == "BF16" else array
    return tensors
