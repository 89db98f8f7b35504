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
        program = ctx.compile(fetch=[dp.tokens], passes={**program_mod.compile_passes(dp, None, 10), **(passes or {})})
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



def packed_weights(passes=None) -> list:
    """The decoding program's constants stored as column panels (stacked over layers: 4 axes, the
    first the layer's; the prompt's chunks are stacked over the chunk dim, 1 here)."""
    with tpo.Context() as ctx:
        dp = program_mod.build(CONFIG, Weights.random(CONFIG, 0), np.array([[1, 2, 3, 4]]), Attention(), Sampling())
        program = ctx.compile(fetch=[dp.tokens], passes={**program_mod.compile_passes(dp, None, 2), **(passes or {})})
    steps = [s.op for n in program.sdg.nodes.values()
             for s in (n.op.steps if isinstance(n.op, ops.FusedOp) else [ops.FusedStep(n.op, (), ())])]
    return [op for op in steps if isinstance(op, ops.ConstOp) and op.value.array.ndim == 4
            and op.value.array.shape[0] == CONFIG.num_layers]


def test_the_weights_a_step_multiplies_are_packed_as_panels():
    """On NumPy the weight matrices a decoding step multiplies (one row here) are stored as column
    panels of 32 (``tempo.transforms.pack_weights``): wqkv (64 columns), w_gate and w_up (64);
    wo and w_down have 32 columns, one panel, and stay. The tokens are the unpacked program's."""
    assert sorted(op.value.array.shape for op in packed_weights()) == [(2, 2, 32, 32)] * 3
    assert not packed_weights({"pack_weights": False})
    tokens, _ = decode(Attention())
    plain, _ = decode(Attention(), passes={"pack_weights": False})
    np.testing.assert_array_equal(tokens, plain)
