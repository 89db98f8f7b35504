"""A loaded model holds each weight's bytes once, and a program built from it holds them as they are.

Bytes are counted over the arrays reachable from the model and the program (each buffer once, by
the array that owns it), not by the process's RSS.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tempo as tpo
from tempo.ir import ops
from tempo.llm import program as program_mod
from tempo.llm.sampling import Sampling

import tiny_gguf
from test_llama_gguf import PROMPT, hf_tiny


def owner(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s buffer (itself, or the base its view chain ends at)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def weight_arrays(weights) -> list[np.ndarray]:
    return [weights.embed, weights.head, weights.final_norm, *weights.layers.values()]


def held_bytes(arrays) -> int:
    """The bytes of the distinct buffers ``arrays`` hold."""
    return sum(a.nbytes for a in {id(o): o for o in map(owner, arrays)}.values())


def parameter_bytes(model: tpo.llm.Llama, tied: bool) -> int:
    """The checkpoint's float32 bytes: every tensor once (a tied head is the embedding)."""
    c = model.config
    layer = (2 * c.hidden_size + 2 * c.hidden_size * c.num_heads * c.head_dim
             + 2 * c.hidden_size * c.num_kv_heads * c.head_dim + 3 * c.hidden_size * c.intermediate_size)
    head = 0 if tied else c.vocab_size * c.hidden_size
    return 4 * (c.vocab_size * c.hidden_size + head + c.hidden_size + c.num_layers * layer)


@pytest.fixture(params=["gguf", "gguf_tied", "safetensors", "safetensors_bf16_tied"])
def loaded(request, tmp_path, checkpoint):
    """(model, whether its head is tied) loaded through each path."""
    kind = request.param
    tied = kind.endswith("tied")
    if kind.startswith("gguf"):
        path = tmp_path / "m.gguf"
        tiny_gguf.write(path, hf_tiny(tie_word_embeddings=tied), "F16")
        return tpo.llm.Llama.from_pretrained(str(path)), tied
    folder, hf = checkpoint("llama3_rope_tied" if tied else "llama_gqa")
    if kind.endswith("bf16_tied"):
        hf.to(dtype=torch.bfloat16).save_pretrained(folder)
    return tpo.llm.Llama.from_pretrained(folder), tied


def test_a_loaded_model_holds_each_weight_once(loaded):
    """No weight is held twice (a tied head is the embedding's buffer), none is a view of the file
    it was read from, and none can be written."""
    model, tied = loaded
    arrays = weight_arrays(model.weights)
    assert held_bytes(arrays) == parameter_bytes(model, tied)
    assert all(type(owner(a)) is np.ndarray and a.dtype == np.float32 for a in arrays)
    assert not any(a.flags.writeable for a in arrays)
    if tied:
        assert np.shares_memory(model.weights.head, model.weights.embed)


def test_a_program_holds_the_model_weights_without_copying_them(loaded):
    """The built program's constants are the model's arrays (the query, key and value matrices
    joined into one, a tied head put in order); compiled on NumPy, the only other bytes of weight
    size are the products' panels, one per matrix."""
    model, tied = loaded
    weights, c = model.weights, model.config
    with tpo.Context() as ctx:
        dp = program_mod.build(c, weights, PROMPT, model.default_attention(), Sampling(), capacity=4)
        constants = [n.op.value.array for n in ctx.sdg.nodes.values() if isinstance(n.op, ops.ConstOp)]
        shared = [a for a in constants if any(np.shares_memory(a, w) for w in weight_arrays(weights))]
        owned = [a for a in constants if not any(a is s for s in shared)]
        joined = c.num_layers * c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim * 4
        head = 4 * c.vocab_size * c.hidden_size if tied else 0
        small = 4 * c.hidden_size * c.intermediate_size       # less than any weight matrix
        assert all(a.nbytes < small for a in owned if a.nbytes not in (joined, head))
        not_joined = {k: v for k, v in weights.layers.items() if k not in ("wq", "wk", "wv")}
        assert held_bytes(shared) == held_bytes([weights.embed, weights.final_norm, *not_joined.values(),
                                                 *([] if tied else [weights.head])])
        program = ctx.compile(fetch=[dp.tokens], backend="numpy", passes=program_mod.compile_passes(dp, "numpy", 1))
    panels = [n.op.value.array for n in program.sdg.nodes.values()
              if isinstance(n.op, ops.ConstOp) and n.op.value.array.ndim == 4]
    matrices = held_bytes([weights.head, *(v for v in weights.layers.values() if v.ndim == 3)])
    assert panels and held_bytes(panels) <= matrices
