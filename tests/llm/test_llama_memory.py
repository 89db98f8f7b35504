"""A model holds each weight's bytes once, in the layout its backend multiplies by, and the programs
built from it hold those bytes as they are.

Bytes are counted over the arrays reachable from the model and the program (each buffer once, by
the array that owns it), not by the process's RSS.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tempo as tpo
from tempo.ir import ops
from tempo.llm import program as program_mod
from tempo.llm.config import LlamaConfig
from tempo.llm.quantized import QuantizedMatrices
from tempo.llm.sampling import Sampling
from tempo.llm.weights import Panels

import tiny_gguf
from test_llama_gguf import PROMPT, hf_tiny


def owner(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s buffer (itself, or the base its view chain ends at)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def arrays_of(value) -> list[np.ndarray]:
    """The arrays a weight is held in: itself, its panels, or its quantised values and scales."""
    if isinstance(value, Panels):
        return [value.values]
    if isinstance(value, QuantizedMatrices):
        return [a for a in (value.q, value.scale, value.offset) if a is not None]
    return [value]


def weight_arrays(weights) -> list[np.ndarray]:
    values = [weights.embed, weights.head, weights.final_norm, *weights.layers.values()]
    return [a for v in values for a in arrays_of(v)]


def held_bytes(arrays) -> int:
    """The bytes of the distinct buffers ``arrays`` hold."""
    return sum(a.nbytes for a in {id(o): o for o in map(owner, arrays)}.values())


def constants(sdg) -> list[np.ndarray]:
    """The arrays of an SDG's constants, those inside fused ops too."""
    found = []
    for node in sdg.nodes.values():
        for op in [node.op, *(step.op for step in getattr(node.op, "steps", ()))]:
            if isinstance(op, ops.ConstOp):
                found.append(op.value.array)
    return found


def parameter_bytes(config, tied: bool) -> int:
    """The checkpoint's float32 bytes: every tensor once (a tied head is the embedding)."""
    c = config
    layer = (2 * c.hidden_size + 2 * c.hidden_size * c.num_heads * c.head_dim
             + 2 * c.hidden_size * c.num_kv_heads * c.head_dim + 3 * c.hidden_size * c.intermediate_size)
    head = 0 if tied else c.vocab_size * c.hidden_size
    return 4 * (c.vocab_size * c.hidden_size + head + c.hidden_size + c.num_layers * layer)


def check_program_holds_the_model_weights(program, weights) -> None:
    """Every constant of a matrix's size in ``program`` is (a view of) one of the model's arrays, and
    every one of the model's matrices (and the embedding) is in it."""
    mine = weight_arrays(weights)
    smallest = min(a.nbytes for a in mine if a.ndim >= 3)             # a layer's matrices, or panels
    found = [a for a in constants(program.sdg) if a.nbytes >= smallest]
    assert all(any(np.shares_memory(a, w) for w in mine) for a in found), [a.shape for a in found]
    assert held_bytes(found) == held_bytes([a for a in mine if a.nbytes >= smallest])


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
    it was read from, and none can be written; on NumPy its matrices are column panels."""
    model, tied = loaded
    arrays = weight_arrays(model.weights)
    assert held_bytes(arrays) == parameter_bytes(model.config, tied)
    assert all(type(owner(a)) is np.ndarray and a.dtype == np.float32 for a in arrays)
    assert not any(a.flags.writeable for a in arrays)
    assert model.weights.tied == tied
    if tied:
        assert np.shares_memory(arrays_of(model.weights.head)[0], arrays_of(model.weights.embed)[0])
    model.hold_weights_for("numpy", 1)
    matrices = [model.weights.head, *(v for v in model.weights.layers.values() if len(v.shape) == 3)]
    assert any(isinstance(m, Panels) for m in matrices)
    assert all(isinstance(m, Panels) == (m.shape[-1] % 32 == 0 and m.shape[-1] >= 64) for m in matrices)
    assert held_bytes(weight_arrays(model.weights)) == parameter_bytes(model.config, tied)


def test_a_program_compiled_on_numpy_holds_the_model_weights_as_they_are(loaded):
    """Built and compiled on NumPy, the program's constants of weight size are the model's own
    arrays (its panels): the compile packs nothing again."""
    model, _ = loaded
    model.hold_weights_for("numpy", 1)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, PROMPT, model.default_attention(), Sampling(), capacity=4)
        program = ctx.compile(fetch=[dp.tokens], backend="numpy", passes=program_mod.compile_passes(dp, "numpy", 4))
        program.run(dp.bounds(model.config.num_layers, 4))
    check_program_holds_the_model_weights(program, model.weights)


CONFIG = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, max_positions=64, tie_word_embeddings=True)


@pytest.mark.parametrize("tied", [True, False])
def test_generating_again_with_another_batch_or_backend_keeps_one_copy(tied):
    """Generating with one sequence, then two (NumPy's panels of 64 columns for 2 to 4 rows), then
    on torch (plain matrices), then one again: after each call the model holds each weight once, the
    call's program holds the model's arrays, and the tokens are those of a model that never held
    another layout."""
    config = replace(CONFIG, tie_word_embeddings=tied)
    model = tpo.llm.Llama.random(config, seed=1)
    assert model.weights.tied == tied
    prompts = {1: np.array([[3, 5, 7]]), 2: np.array([[3, 5, 7], [9, 2, 4]])}
    widths = {1: 32, 2: 64}
    for backend, batch in (("numpy", 1), ("numpy", 2), ("torch", 2), ("numpy", 1)):
        ids = model.generate(prompts[batch], max_new_tokens=4, backend=backend)
        fresh = tpo.llm.Llama.random(config, seed=1).generate(prompts[batch], max_new_tokens=4, backend=backend)
        np.testing.assert_array_equal(ids, fresh)
        assert held_bytes(weight_arrays(model.weights)) == parameter_bytes(config, tied)
        gate = model.weights.layers["w_gate"]
        if backend == "numpy":
            assert isinstance(gate, Panels) and gate.width == widths[batch]
            check_program_holds_the_model_weights(model.last_program, model.weights)
        else:
            assert isinstance(gate, np.ndarray) and isinstance(model.weights.head, np.ndarray)
            assert not tied or np.shares_memory(model.weights.head, model.weights.embed)


def test_torch_reads_a_read_only_constant_in_place():
    """On the CPU the torch backend's constant is a tensor over the array's own bytes, read-only or not."""
    from tempo.runtime.backends import torch as torch_backend

    for writeable in (True, False):
        array = np.arange(12, dtype=np.float32).reshape(3, 4)
        array.flags.writeable = writeable
        tensor = torch_backend.constant_tensor(array, "cpu")
        assert tensor.data_ptr() == array.ctypes.data
        np.testing.assert_array_equal(tensor.numpy(), array)


def test_quantised_matrices_are_held_joined_once_and_read_by_the_program_as_they_are(tmp_path):
    """The query, key and value matrices, and the gate and up ones, are joined once when loading;
    the program's products compute from the model's own quantised matrices."""
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), "Q8_0", embed_type="Q8_0")
    model = tpo.llm.Llama.from_pretrained(str(path), quantized=True)
    weights = model.weights
    assert set(weights.layers) == {"input_norm", "wqkv", "wo", "post_norm", "w_gate_up", "w_down"}
    assert all(isinstance(weights.layers[k], QuantizedMatrices) for k in ("wqkv", "wo", "w_gate_up", "w_down"))
    plain = tpo.llm.Llama.from_pretrained(str(path)).weights
    for name in ("wq", "wk", "wv", "w_gate", "w_up"):
        np.testing.assert_allclose(weights.matrices(name), plain.matrices(name), rtol=1e-6, atol=1e-6)
    with tpo.Context() as ctx:
        (l, _), = ctx.dims("l")
        read = program_mod.layer_weights(weights, l)
    assert all(read[k].matrices is weights.layers[k] for k in ("wqkv", "wo", "w_gate_up", "w_down"))
    ids = model.generate(PROMPT, max_new_tokens=4)
    assert ids.shape == (PROMPT.shape[0], PROMPT.shape[1] + 4)
    assert all(model.weights.layers[k] is weights.layers[k] for k in ("wqkv", "w_gate_up"))
