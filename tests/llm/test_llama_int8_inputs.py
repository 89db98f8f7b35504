"""Products from quantised weights with 8-bit inputs (``int8_inputs=True``): the input rows rounded
per block of 32, then multiplied exactly by the weights (the native kernels' integer dot products
against NumPy's float32 product of the rounded rows)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import quants as gguf_quants
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.cli import main
from tempo.llm import native
from tempo.llm.quantized import NATIVE_ROWS, QuantizedMatrices, rounded_inputs

import tiny_gguf
from test_llama_gguf import PROMPT, hf_tiny
from test_llama_quantized import BLOCK, TYPES, quantized


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 4), blocks=st.integers(1, 5), seed=st.integers(0, 2 ** 31),
       spread=st.floats(1e-3, 1e3), zero_block=st.booleans())
def test_rounded_inputs_lie_on_each_block_s_grid_within_half_a_step(rows, blocks, seed, spread, zero_block):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, 32 * blocks)) * spread).astype(np.float32)
    if zero_block:
        x[:, :32] = 0
    got = rounded_inputs(x)
    assert got.shape == x.shape and got.dtype == np.float32
    for xb, gb in zip(x.reshape(-1, 32), got.reshape(-1, 32)):
        step = np.float32(np.abs(xb).max() / np.float32(127))
        if step == 0:
            assert not gb.any()
            continue
        levels = gb / step
        np.testing.assert_allclose(levels, np.rint(levels), atol=1e-3)
        assert np.abs(levels).max() <= 127.001
        assert np.all(np.abs(gb - xb) <= step * 0.5001)


def _exact_bound(x: np.ndarray, weights: np.ndarray):
    rounded = rounded_inputs(x)
    return rounded @ weights.T, np.abs(rounded) @ np.abs(weights).T


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("rows", [1, 3, 6, NATIVE_ROWS + 3])
def test_the_product_is_the_rounded_rows_by_the_weights(type_name, rows):
    """Native kernels (up to NATIVE_ROWS rows, where AVX512-VNNI is there) and NumPy (more rows):
    the float32 product of the rounded rows with the dequantised weights, to float32 rounding; an
    output count not a multiple of anything, input sizes with a last chunk of half the usual
    width (5 blocks of 32)."""
    inputs = 2 * BLOCK[type_name] if BLOCK[type_name] == 256 else 5 * BLOCK[type_name]
    raw, matrices = quantized(type_name, 2, 37, inputs)
    weights = gguf_quants.dequantize(raw[1], gguf.GGMLQuantizationType[type_name])
    x = np.random.default_rng(rows).standard_normal((rows, inputs)).astype(np.float32)
    expected, scale = _exact_bound(x, weights)
    got = matrices.with_int8_inputs().matmul(x, 1)
    assert got.shape == (rows, 37) and got.dtype == np.float32
    np.testing.assert_array_less(np.abs(got - expected), 1e-5 * scale + 1e-30)


@pytest.mark.parametrize("type_name", TYPES)
def test_the_8_bit_input_kernels_give_each_row_of_a_batch_the_bits_of_that_row_alone(type_name):
    if native.int8_input_kernels() is None:
        pytest.skip(native.INT8_INPUTS.unavailable())
    inputs = 2 * BLOCK[type_name] if BLOCK[type_name] == 256 else 3 * BLOCK[type_name]
    _, matrices = quantized(type_name, 1, 21, inputs)
    rounded = matrices.with_int8_inputs()
    x = np.random.default_rng(3).standard_normal((NATIVE_ROWS, inputs)).astype(np.float32)
    alone = np.concatenate([rounded.native_matmul(x[i:i + 1], 0) for i in range(NATIVE_ROWS)])
    for rows in range(1, NATIVE_ROWS + 1):
        np.testing.assert_array_equal(rounded.native_matmul(x[:rows], 0), alone[:rows])


def test_with_int8_inputs_shares_the_arrays_and_changes_only_the_products():
    raw, matrices = quantized("Q4_1", 1, 8, 64)
    rounded = matrices.with_int8_inputs()
    assert rounded.int8_inputs and not matrices.int8_inputs
    assert rounded.q is matrices.q and rounded.scale is matrices.scale and rounded.offset is matrices.offset
    assert QuantizedMatrices.concat([rounded, rounded]).int8_inputs


def test_without_the_8_bit_kernels_the_products_run_with_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(native.INT8_INPUTS, "loaded", {})
    assert native.int8_input_kernels() is None
    assert "products with rounded inputs run with NumPy" in native.INT8_INPUTS.unavailable()
    raw, matrices = quantized("Q8_0", 1, 40, 64)
    weights = gguf_quants.dequantize(raw[0], gguf.GGMLQuantizationType.Q8_0)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    expected, scale = _exact_bound(x, weights)
    np.testing.assert_array_less(np.abs(matrices.with_int8_inputs().matmul(x, 0) - expected), 1e-5 * scale + 1e-30)
    with pytest.raises(tpo.TempoError, match="not built"):
        matrices.with_int8_inputs().native_matmul(x, 0)


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_1"])
def test_a_model_with_8_bit_inputs_decodes_as_its_numpy_reference(tmp_path, monkeypatch, type_name):
    """Every product of the model with rounded inputs, by the native kernels against NumPy's float32
    products of the rounded rows; and close to the model computing from float32 inputs."""
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(tie_word_embeddings=True), type_name, embed_type=type_name)
    model = tpo.llm.Llama.from_pretrained(str(path), quantized=True, int8_inputs=True)
    assert all(model.weights.layers[k].int8_inputs for k in ("wqkv", "wo", "w_down")) and model.weights.head.int8_inputs
    sequence = PROMPT[:1]
    logits = model.logits(sequence)
    ids = model.generate(PROMPT, max_new_tokens=6)
    plain = tpo.llm.Llama.from_pretrained(str(path), quantized=True).logits(sequence)
    assert 0 < np.abs(logits - plain).max() < 0.05 * np.abs(plain).max()
    monkeypatch.setattr(native.INT8_INPUTS, "loaded", {"lib": None, "why": "left out by the test"})
    np.testing.assert_allclose(model.logits(sequence), logits, atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=6), ids)


def test_int8_inputs_needs_quantised_weights_from_a_gguf_file(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), "Q8_0", tokenizer=False, template=None)
    with pytest.raises(tpo.TempoError, match="needs quantized=True"):
        tpo.llm.Llama.from_pretrained(str(path), int8_inputs=True)
    with pytest.raises(tpo.TempoError, match="read GGUF files"):
        tpo.llm.Llama.from_pretrained(str(tmp_path), quantized=True)
    assert main(["generate", "--model", str(path), "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                 "--quantized", "--int8-inputs"]) == 0
    expected = tpo.llm.Llama.from_pretrained(str(path), quantized=True, int8_inputs=True).generate(
        [[1, 2, 3]], max_new_tokens=4)[0, 3:]
    printed = [int(t) for t in capsys.readouterr().out.split()]         # ids: the file has no vocabulary
    assert printed and printed == expected.tolist()[:len(printed)]
