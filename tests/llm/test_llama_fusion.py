"""The decoder's layer body fuses: per layer and step, the hidden state's merge and two fused
islands (up to the keys and values; from their reads on), whatever the attention."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.ir import ops
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.sampling import Sampling
from tempo.llm.weights import Weights

CONFIG = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=8, max_positions=128)


def decode(attention: Attention, passes=None):
    with tpo.Context() as ctx:
        dp = program_mod.build(CONFIG, Weights.random(CONFIG, 0), np.array([[1, 2, 3, 4]]), attention, Sampling())
        program = ctx.compile(fetch=[dp.tokens], passes=passes)
    (tokens,) = program.run(dp.bounds(CONFIG.num_layers, 10))
    body = [n.op for n in program.sdg.nodes.values()
            if len(n.domain) == 2 and n.domain[0] is dp.layers[0] and n.domain[1] is dp.positions[0]]
    return tokens, body


@pytest.mark.parametrize("attention", [Attention(), Attention(window=3)], ids=str)
def test_layer_body_is_two_fused_islands(attention):
    tokens, body = decode(attention)
    assert sorted(type(op).__name__ for op in body) == ["FusedOp", "FusedOp", "MergeOp"]
    assert sum(len(op.steps) for op in body if isinstance(op, ops.FusedOp)) > 40
    unfused, plain = decode(attention, passes={"fuse": False})
    assert len(plain) > 40
    np.testing.assert_array_equal(tokens, unfused)
