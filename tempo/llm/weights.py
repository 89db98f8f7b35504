"""A Llama checkpoint's tensors: read from safetensors or GGUF files, checked, stacked per layer, each
float32 matrix held once, as an array or as the column panels a backend multiplies by (:class:`Panels`)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tempo.errors import TempoError
from tempo.llm.config import LlamaConfig
from tempo.llm.gguf_file import GGUFFile, Tensor, hf_tensors
from tempo.llm.quantized import TYPES as QUANTIZED_TYPES, QuantizedMatrices
from tempo.transforms import pack_weights

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
# layer matrices held joined along their outputs, multiplied by as one: the query, key and value
# matrices always, the gate and up matrices where both stay quantised in one type
JOINED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}


@dataclass(frozen=True)
class Panels:
    """Float32 matrices (..., k, n) held as column panels of ``width`` columns, the layout the NumPy
    backend multiplies a few rows by (:mod:`tempo.transforms.pack_weights`): ``values``
    (..., n // width, k, width), C-ordered and read-only. A program reads them put back together
    (:func:`tempo.llm.program.weight`); the compiler makes each product of a few rows multiply the
    panels themselves, so the program holds no other copy."""

    values: np.ndarray

    @classmethod
    def of(cls, matrices: np.ndarray, width: int) -> "Panels":
        """``matrices`` (..., k, n) as panels of ``width`` columns (one copy)."""
        return cls(frozen(pack_weights.panels_of(matrices, width)))

    @property
    def width(self) -> int:
        return self.values.shape[-1]

    @property
    def shape(self) -> tuple:
        """The matrices' shape, (..., k, n)."""
        *lead, count, k, width = self.values.shape
        return (*lead, k, count * width)

    @property
    def nbytes(self) -> int:
        return self.values.nbytes

    def matrices(self) -> np.ndarray:
        """The matrices (..., k, n), read-only: a copy."""
        return frozen(pack_weights.matrix_of(self.values))

    def columns(self, ids) -> np.ndarray:
        """Columns ``ids`` of one matrix (k, n), each as a row: (*ids.shape, k) (a tied head's
        panels read as the embedding)."""
        ids = np.asarray(ids)
        return self.values[ids // self.width, :, ids % self.width]

    def transposed(self) -> np.ndarray:
        """One matrix (k, n) transposed, (n, k) in C order, read-only: a copy."""
        count, k, width = self.values.shape
        return frozen(np.ascontiguousarray(self.values.transpose(0, 2, 1)).reshape(count * width, k))


BLOCK_BYTES = 1 << 20  # the columns a layout change copies at once: about 1 MB of them


def laid_out(value, width: int | None):
    """A float32 matrix stack (an array (..., k, n) or :class:`Panels`) as panels of ``width``
    columns, or as an array for None: ``value`` itself where it is already so, else a copy made
    from panels a block of about :data:`BLOCK_BYTES` of columns at a time (the copy and ``value``
    are the most held at once)."""
    if not isinstance(value, Panels):
        return value if width is None else Panels.of(value, width)
    if value.width == width:
        return value
    *lead, k, n = value.shape
    out = np.empty((*lead, k, n) if width is None else (*lead, n // width, k, width), np.float32)
    whole = math.lcm(value.width, width or 1)                # a block's columns: whole panels of both
    step = whole * max(1, BLOCK_BYTES // (4 * k * whole))
    for i in np.ndindex(*lead):
        for start in range(0, n, step):
            block = pack_weights.matrix_of(value.values[i][start // value.width:(start + step) // value.width])
            if width is None:
                out[i][:, start:start + step] = block
            else:
                out[i][start // width:(start + step) // width] = pack_weights.panels_of(block, width)
    return frozen(out) if width is None else Panels(frozen(out))


@dataclass
class Weights:
    """``embed`` (V, D), ``head`` (D, V), ``final_norm`` (D,), and ``layers``: name -> array
    stacked over the layers (leading axis L), matrices as (in, out): ``input_norm``, ``wqkv``
    (the query, key and value matrices joined along their outputs), ``wo``, ``post_norm``,
    ``w_gate`` and ``w_up`` (joined as ``w_gate_up`` where both stay quantised in one type) and
    ``w_down``; ``parts``: each joined matrix's parts, checkpoint name -> (the joined matrix, its
    first output, the output after its last). A matrix kept quantised (the head, or a layer
    matrix) is a :class:`tempo.llm.quantized.QuantizedMatrices` instead, (out, in) per layer (the
    head: one layer); a float32 one (the head, a layer matrix) may be held as :class:`Panels`
    (:meth:`lay_out`). ``tied``: the head is held as the embedding's bytes (``embed.T``, or,
    as panels, the same :class:`Panels` as ``embed``, whose columns are the embedding's rows:
    :meth:`embedding`)."""

    embed: np.ndarray | Panels
    head: np.ndarray | Panels | QuantizedMatrices
    final_norm: np.ndarray
    layers: dict[str, np.ndarray | Panels | QuantizedMatrices]
    tied: bool = False
    parts: dict[str, tuple[str, int, int]] = field(default_factory=dict)

    @classmethod
    def from_tensors(cls, tensors: dict, config: LlamaConfig, source: str = "checkpoint"):
        """Pick, check and stack the tensors a Llama needs from ``tensors`` (Hugging Face names:
        arrays, memory-mapped or not, or GGUF :class:`Tensor` s). Each float32 array is written
        once, straight into its stack over the layers (one tensor's values converted at a time;
        the query, key and value matrices into their columns of ``wqkv``), and made read-only, so
        that a program holds it as it is (``tpo.from_numpy``); a tied output head is the
        embedding's transpose, not a copy."""
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
            head, tied = QuantizedMatrices.from_raw(head.type_name, [head.raw], c.vocab_size, c.hidden_size), False
        elif tied:
            head = embed.T                                      # (D, V): the embedding's bytes, read transposed
        else:
            head = owned("lm_head.weight", head, transpose=True)
        kept, read = {}, {}                                     # the stacks kept quantised; the others' tensors
        for key, (name, shape) in LAYER_TENSORS.items():
            names = [f"model.layers.{i}.{name}" for i in range(c.num_layers)]
            found = [take(n, shape(c)) for n in names]
            kinds = {v.type_name if isinstance(v, Tensor) and v.kept else None for v in found}
            if len(kinds) == 1 and kinds <= set(QUANTIZED_TYPES):       # one quantised type in every layer
                kept[key] = QuantizedMatrices.from_raw(found[0].type_name, [v.raw for v in found], *shape(c))
            else:
                read[key] = list(zip(names, found))

        def fill(out: np.ndarray, key: str) -> None:
            """Write each layer's ``key`` into ``out`` (L, ...), matrices as (in, out)."""
            for i in range(c.num_layers):
                if key in kept:
                    out[i] = kept[key].dequantize(i).T
                else:
                    name, value = read[key][i]
                    value = values(name, value)
                    out[i] = value.T if key in TRANSPOSED else value

        def stack(key: str) -> np.ndarray | QuantizedMatrices:
            if key in kept:
                return kept[key]
            layer = LAYER_TENSORS[key][1](c)
            out = np.empty((c.num_layers, *(layer[::-1] if key in TRANSPOSED else layer)), np.float32)
            fill(out, key)
            return frozen(out)

        def join(group: str) -> np.ndarray | QuantizedMatrices | None:
            """``group``'s matrices joined along their outputs (each one's columns recorded in
            ``parts``), or None where they stay apart (gate and up not quantised in one type)."""
            keys = JOINED[group]
            matrices = QuantizedMatrices.concat([kept[k] for k in keys]) if all(k in kept for k in keys) else None
            if matrices is None and group != "wqkv":
                return None
            widths = [LAYER_TENSORS[k][1](c)[0] for k in keys]
            starts = [int(s) for s in np.cumsum([0, *widths[:-1]])]
            if matrices is None:
                matrices = np.empty((c.num_layers, c.hidden_size, sum(widths)), np.float32)
                for k, start, width in zip(keys, starts, widths):
                    fill(matrices[:, :, start:start + width], k)
                matrices = frozen(matrices)
            parts.update({k: (group, start, start + width) for k, start, width in zip(keys, starts, widths)})
            return matrices

        layers, parts = {}, {}
        for key in LAYER_TENSORS:
            group = next((g for g, keys in JOINED.items() if key in keys), None)
            if group is None:
                layers[key] = stack(key)
            elif key == JOINED[group][0] and (matrices := join(group)) is not None:
                layers[group] = matrices
            elif key not in parts:
                layers[key] = stack(key)
        final_norm = owned("model.norm.weight", take("model.norm.weight", (c.hidden_size,)))
        return cls(embed=embed, head=head, final_norm=final_norm, layers=layers, tied=tied, parts=parts)

    @classmethod
    def random(cls, config: LlamaConfig, seed: int = 0) -> "Weights":
        """Random weights (normal, scaled by ``1/sqrt(fan in)``; norms one), e.g. to benchmark a size;
        the head is the embedding's where ``config.tie_word_embeddings``."""
        rng = np.random.default_rng(seed)

        def normal(shape: tuple) -> np.ndarray:
            return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

        c = config
        tensors = {"model.embed_tokens.weight": normal((c.vocab_size, c.hidden_size)),
                   "model.norm.weight": np.ones(c.hidden_size, np.float32)}
        if not c.tie_word_embeddings:
            tensors["lm_head.weight"] = normal((c.vocab_size, c.hidden_size))
        for i in range(c.num_layers):
            for name, shape in LAYER_TENSORS.values():
                shape = shape(c)
                tensors[f"model.layers.{i}.{name}"] = np.ones(shape, np.float32) if len(shape) == 1 else normal(shape)
        return cls.from_tensors(tensors, config, "random weights")

    def lay_out(self, width: Callable[[int], int | None]) -> None:
        """Hold each float32 matrix, the layers' and the head, as :class:`Panels` of ``width(n)``
        columns (``n``: its columns), or as an array where that is None (:func:`laid_out`). One
        matrix stack at a time: each one's other layout is dropped before the next is made (where
        nothing else holds it). A tied head and the embedding stay one: its panels, or the
        embedding (V, D) and its transpose."""
        for key in list(self.layers):
            if isinstance(self.layers[key], Panels) or (isinstance(self.layers[key], np.ndarray)
                                                        and self.layers[key].ndim == 3):
                self.layers[key] = laid_out(self.layers[key], width(self.layers[key].shape[-1]))
        if isinstance(self.head, QuantizedMatrices):
            return
        to = width(self.head.shape[-1])
        if not self.tied:
            self.head = laid_out(self.head, to)
        elif to is not None:
            self.head = self.embed = laid_out(self.head, to)
        elif isinstance(self.head, Panels):
            embed = self.head.transposed()
            self.embed, self.head = embed, embed.T

    def embedding(self, ids) -> np.ndarray:
        """The embedding's rows of the token ids ``ids``: float32 (*ids.shape, D)."""
        return self.embed.columns(ids) if isinstance(self.embed, Panels) else self.embed[ids]

    def matrices(self, name: str) -> np.ndarray:
        """The float32 values of the checkpoint's per-layer tensor ``name`` (a key of
        :data:`LAYER_TENSORS`, or of ``layers``) stacked over the layers, matrices as (in, out): a
        copy where it is held otherwise (joined, as panels, quantised)."""
        if name in self.parts:
            group, start, stop = self.parts[name]
            return self.matrices(group)[..., start:stop]
        if name not in self.layers:
            raise TempoError(f"the weights hold no layer tensor {name!r}; they hold "
                             f"{', '.join([*self.layers, *self.parts])}")
        value = self.layers[name]
        if isinstance(value, QuantizedMatrices):
            return value.dequantized_stack()
        return value.matrices() if isinstance(value, Panels) else value

    def bytes_per_token(self) -> int:
        """The bytes of weights one decoding step reads: every layer matrix (its quantised bytes and
        scales where it is kept quantised), the norms, the output head and one embedding row."""
        total = 2 * self.final_norm.nbytes                          # the norm and one embedding row
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
