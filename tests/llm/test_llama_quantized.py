"""Products computed from weights kept quantised (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) against gguf's dequantised
float32 weights."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import quants as gguf_quants
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.llm import native, program
from tempo.llm import quantized as quantized_module
from tempo.llm.quantized import QuantizedMatrices

import tiny_gguf
from test_llama_gguf import PROMPT, hf_tiny

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]
BLOCK = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 256, "Q6_K": 256}     # weights per GGML block


def quantized(type_name: str, layers: int, out: int, inputs: int, seed: int = 0):
    """Random matrices in ``type_name``: gguf quantizes the 32-blocks; K-quant blocks are random
    bytes with small float16 scales (``tiny_gguf.encode``)."""
    rng = np.random.default_rng(seed)
    raw = [tiny_gguf.encode(rng.standard_normal((out, inputs)).astype(np.float32), type_name, rng)[0]
           for _ in range(layers)]
    return raw, QuantizedMatrices.from_raw(type_name, raw, out, inputs)


@settings(max_examples=30, deadline=None)
@given(type_name=st.sampled_from(TYPES), out=st.integers(1, 600), blocks=st.integers(1, 6),
       lead=st.lists(st.integers(1, 5), min_size=1, max_size=3), layer=st.integers(0, 1))
@example(type_name="Q4_0", out=1, blocks=5, lead=[1], layer=0)  # one output, its terms cancelling
def test_quantised_product_equals_the_dequantised_float32_one(type_name, out, blocks, lead, layer):
    """Any output count (the last panel shorter), input size, leading axes and layer, by NumPy's
    panels and by the native kernels; the stored form holds gguf's own dequantisation of the
    file's bytes."""
    inputs = BLOCK[type_name] * blocks * (1 if BLOCK[type_name] == 256 else 5)
    raw, matrices = quantized(type_name, 2, out, inputs)
    weights = gguf_quants.dequantize(raw[layer], gguf.GGMLQuantizationType[type_name])
    np.testing.assert_allclose(matrices.dequantize(layer), weights, rtol=1e-6, atol=1e-6 * np.abs(weights).max())
    x = np.random.default_rng(1).standard_normal((*lead, inputs)).astype(np.float32)
    expected = x @ weights.T
    scale = np.abs(x) @ np.abs(weights).T  # a float32 sum's rounding grows with its terms, not with the sum
    products = [matrices.panel_matmul] + ([matrices.native_matmul] if native.kernels() is not None else [])
    for product in products:
        got = product(x, layer)
        assert got.shape == (*lead, out) and got.dtype == np.float32
        np.testing.assert_array_less(np.abs(got - expected), 1e-5 * scale + 1e-30)


@pytest.mark.parametrize("type_name", TYPES)
def test_the_native_kernels_give_each_row_of_a_batch_the_bits_of_that_row_alone(type_name):
    """1 to 9 input rows (the kernels widen each block once for up to 4 rows: whole groups and
    every remainder): each row's outputs equal, bit for bit, that row's product on its own, and
    the dequantised float32 product."""
    if native.kernels() is None:
        pytest.skip(native.unavailable())
    inputs = 2 * BLOCK[type_name] if BLOCK[type_name] == 256 else 5 * BLOCK[type_name]
    raw, matrices = quantized(type_name, 1, 37, inputs)
    weights = gguf_quants.dequantize(raw[0], gguf.GGMLQuantizationType[type_name])
    x = np.random.default_rng(2).standard_normal((9, inputs)).astype(np.float32)
    alone = np.concatenate([matrices.native_matmul(x[i:i + 1], 0) for i in range(9)])
    np.testing.assert_allclose(alone, x @ weights.T, rtol=1e-5, atol=1e-5 * np.abs(alone).max())
    for rows in range(1, 10):
        np.testing.assert_array_equal(matrices.native_matmul(x[:rows], 0), alone[:rows])


def test_the_native_kernels_build_into_the_cache_folder(tmp_path, monkeypatch):
    """Where the C compiler and AVX-512 are there (the machines the benchmarks run on), the
    kernels build into ``$TEMPO_CACHE/kernels`` and load."""
    if native.kernels() is None:
        pytest.skip(native.unavailable())
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setattr(native.KERNELS, "loaded", {})
    assert native.kernels() is not None and native.unavailable() is None
    assert [p.suffix for p in (tmp_path / "kernels").iterdir()] == [".so"]


def test_without_a_compiler_the_products_run_with_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(native.KERNELS, "loaded", {})
    assert native.kernels() is None and "products run with NumPy" in native.unavailable()
    raw, matrices = quantized("Q4_1", 1, 40, 64)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    expected = x @ gguf_quants.dequantize(raw[0], gguf.GGMLQuantizationType.Q4_1).T
    np.testing.assert_allclose(matrices.matmul(x, 0), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    with pytest.raises(tpo.TempoError, match="not built"):
        matrices.native_matmul(x, 0)


@pytest.mark.parametrize("product", ["panel_matmul", "native_matmul"])
def test_a_product_refuses_inputs_of_another_size_and_layers_outside_the_stack(product):
    """The native kernels read raw memory: a wrong size or layer is an error, not a read past the arrays."""
    if product == "native_matmul" and native.kernels() is None:
        pytest.skip(native.unavailable())
    _, matrices = quantized("Q8_0", 2, 8, 64)
    run = getattr(matrices, product)
    with pytest.raises(tpo.TempoError, match="inputs of 64"):
        run(np.ones((2, 32), np.float32), 0)
    with pytest.raises(tpo.TempoError, match="layer 2 of a stack of 2"):
        run(np.ones((1, 64), np.float32), 2)


@given(st.integers(1, 3), st.integers(1, 70), st.floats(1e-6, 1e-2), st.integers(0, 2 ** 31))
@settings(max_examples=30, deadline=None)
def test_the_host_functions_norm_and_silu_are_float32_rms_norm_and_silu(rows, width, eps, seed):
    """What a quantised layer's host functions compute around their products, against float64."""
    rng = np.random.default_rng(seed)
    x, w = (rng.normal(size=s).astype(np.float32) * 3 for s in ((rows, width), (width,)))
    got = program.host_rms_norm(x, w, eps)
    wide = x.astype(np.float64)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, wide / np.sqrt((wide ** 2).mean(-1, keepdims=True) + eps) * w, rtol=1e-5,
                               atol=1e-5)
    assert program.host_silu(x).dtype == np.float32
    np.testing.assert_allclose(program.host_silu(x), wide / (1 + np.exp(-wide)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("writable", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (3, 5), (0, 64)])
def test_the_address_passed_to_the_kernels_is_the_array_s_own(shape, writable):
    a = np.ones(shape, np.float32)
    a.flags.writeable = writable
    assert quantized_module.address(a) == a.ctypes.data


@pytest.mark.parametrize("type_name, ratio", [("Q8_0", (1 + 4 / 32) / 4), ("Q4_0", (0.5 + 4 / 32) / 4),
                                              ("Q4_1", (0.5 + 8 / 32) / 4), ("Q4_K", (0.5 + 8 / 32) / 4),
                                              ("Q6_K", (1 + 4 / 16) / 4)])
def test_quantised_matrices_read_fewer_bytes(type_name, ratio):
    """The bytes a product reads: the values and float32 block scales, against float32 weights
    (Q4_K: a scale and an offset per 32; Q6_K: its 6-bit values as int8, a scale per 16)."""
    _, matrices = quantized(type_name, 3, 192, 256)
    assert matrices.nbytes_per_layer == pytest.approx(192 * 256 * 4 * ratio, rel=0.01)


@pytest.mark.parametrize("type_name, tied", [("Q8_0", False), ("Q4_1", True), ("Q4_K", False),
                                             pytest.param("Q6_K", True, marks=pytest.mark.slow),
                                             pytest.param("Q4_0", False, marks=pytest.mark.slow)])
def test_a_model_computing_from_quantised_weights_decodes_as_the_dequantised_one(tmp_path, type_name, tied):
    """Every matrix quantised, the output head too (the embedding's, when tied)."""
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(tie_word_embeddings=tied), type_name, embed_type=type_name)
    plain = tpo.llm.Llama.from_pretrained(str(path))
    packed = tpo.llm.Llama.from_pretrained(str(path), quantized=True)
    assert all(isinstance(packed.weights.layers[k], QuantizedMatrices) for k in ("wqkv", "wo", "w_gate_up", "w_down"))
    assert isinstance(packed.weights.head, QuantizedMatrices) and packed.weights.head.out_features == 265
    vocab = np.arange(packed.config.vocab_size)
    np.testing.assert_array_equal(packed.weights.embedding(vocab), plain.weights.embedding(vocab))
    assert packed.weights.bytes_per_token() < 0.4 * plain.weights.bytes_per_token()
    ids = plain.generate(PROMPT, max_new_tokens=8)
    np.testing.assert_array_equal(packed.generate(PROMPT, max_new_tokens=8), ids)
    np.testing.assert_allclose(packed.logits(ids), plain.logits(ids), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("type_name", ["Q4_1"] + [pytest.param(t, marks=pytest.mark.slow)
                                                  for t in ("Q8_0", "Q6_K", "Q4_K", "Q4_0")])
def test_decoding_from_the_native_kernels_matches_the_dequantised_model(tmp_path, type_name):
    """Six positions of one sequence: every product of the prefill has at most NATIVE_ROWS rows,
    so the native kernels compute all of them (where they are built); the decoded ids on the
    torch backend (the products are the same host function there) equal the dequantised
    model's on NumPy."""
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), type_name, embed_type=type_name)
    plain = tpo.llm.Llama.from_pretrained(str(path))
    packed = tpo.llm.Llama.from_pretrained(str(path), quantized=True)
    sequence = PROMPT[:1]
    assert sequence.size <= quantized_module.NATIVE_ROWS
    np.testing.assert_allclose(packed.logits(sequence), plain.logits(sequence), atol=1e-4, rtol=1e-4)
    ids = plain.generate(PROMPT, max_new_tokens=8)
    np.testing.assert_array_equal(packed.generate(PROMPT, max_new_tokens=8, backend="torch"), ids)
