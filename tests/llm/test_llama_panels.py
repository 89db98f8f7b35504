"""A model's float32 matrices held as column panels (``tempo.llm.weights.Panels``), laid out again
for another width or as plain matrices, with the same values."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tempo.llm.config import LlamaConfig
from tempo.llm.weights import Panels, Weights, laid_out

CONFIG = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, max_positions=64, tie_word_embeddings=True)


def test_panels_hold_the_matrices_and_lay_out_again_with_the_same_values():
    matrices = np.random.default_rng(0).standard_normal((3, 16, 96)).astype(np.float32)
    panels = laid_out(matrices, 32)
    assert isinstance(panels, Panels) and panels.shape == (3, 16, 96) and panels.width == 32
    assert not panels.values.flags.writeable and panels.nbytes == matrices.nbytes
    assert laid_out(panels, 32) is panels
    wider = laid_out(panels, 48)
    assert wider.values.shape == (3, 2, 16, 48)
    plain = laid_out(wider, None)
    assert isinstance(plain, np.ndarray) and not plain.flags.writeable
    np.testing.assert_array_equal(plain, matrices)
    np.testing.assert_array_equal(panels.matrices(), matrices)


def test_a_single_matrix_s_columns_and_transpose():
    head = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)     # (hidden, vocab)
    panels = Panels.of(head, 16)
    ids = np.array([[0, 17, 63], [5, 5, 48]])
    np.testing.assert_array_equal(panels.columns(ids), head.T[ids])
    transposed = panels.transposed()
    assert transposed.flags.c_contiguous
    np.testing.assert_array_equal(transposed, head.T)


@pytest.mark.parametrize("tied", [True, False])
def test_weights_lay_out_keeps_the_values_and_a_tied_head_one_with_the_embedding(tied):
    weights = Weights.random(replace(CONFIG, tie_word_embeddings=tied))
    assert weights.tied == tied
    names = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "input_norm"]
    before = {name: weights.matrices(name).copy() for name in names}
    head, embed = np.array(weights.head), np.array(weights.embed)
    ids = np.arange(CONFIG.vocab_size)
    for width in (32, 64, None, 32):
        weights.lay_out(lambda columns: width if width is not None and columns % width == 0
                        and columns >= 2 * width else None)
        for name in names:
            np.testing.assert_array_equal(weights.matrices(name), before[name])
        np.testing.assert_array_equal(weights.embedding(ids), embed)
        plain_head = weights.head.matrices() if isinstance(weights.head, Panels) else weights.head
        np.testing.assert_array_equal(plain_head, head)
        assert isinstance(weights.head, Panels) == (width is not None)
        if tied and width is not None:
            assert weights.embed is weights.head
        elif tied:
            assert weights.embed.flags.c_contiguous and np.shares_memory(weights.head, weights.embed)


@pytest.mark.parametrize("width", [16, 48, 96, None])
def test_a_layout_change_copied_block_by_block_keeps_every_column(monkeypatch, width):
    """Blocks of the fewest whole panels of both widths (``BLOCK_BYTES`` made tiny: 5 to 15 blocks)."""
    from tempo.llm import weights as weights_module

    monkeypatch.setattr(weights_module, "BLOCK_BYTES", 1)
    matrices = np.random.default_rng(2).standard_normal((2, 8, 480)).astype(np.float32)
    got = laid_out(laid_out(matrices, 32), width)
    np.testing.assert_array_equal(got if width is None else got.matrices(), matrices)
    assert width is None or got.width == width
