"""Keys and values are ordinary RTs: the runtime stores them in a block store for causal
attention and in a window store (memory flat in the length) for window attention; the block
store lays the rows out per (batch, kv head), where attention's products read them."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.sampling import Sampling
from tempo.runtime.executor import Executor


def run_stores(folder: str, attention: str, length: int, prompt: bool = False) -> list:
    """The stores of the decoding steps' nodes (``prompt``: of the prefill's) after a run."""
    model = tpo.llm.Llama.from_pretrained(folder)
    ids = np.array([[3, 1, 4]], np.int64)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, ids, Attention.parse(attention), Sampling())
        program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, length + 1))
    bounds = {bound.name: value for bound, value in dp.bounds(model.config.num_layers, length + 1).items()}
    executor = Executor(program.sdg, program.ast, program.backend, bounds, keep={n for n, _ in program.fetch})
    executor.run()
    dim = (dp.chunks if prompt else dp.positions)[0]
    return [store for (n, _), store in executor.stores.items() if dim in program.sdg.nodes[n].domain]


def kv_stores(folder: str, attention: str, length: int, prompt: bool = False) -> dict:
    return {type(s).__name__: s.nbytes() for s in run_stores(folder, attention, length, prompt)
            if type(s).__name__ in ("BlockStore", "WindowStore")}


@pytest.mark.parametrize("attention, kind", [("causal", "BlockStore"), ("window:4", "WindowStore")])
def test_kv_store_follows_the_attention(checkpoint, attention, kind):
    """Decoding's keys and values: a block store (causal) or a window store; the prompt's, filled
    chunk by chunk: a block store, whatever the decoding steps."""
    folder, _ = checkpoint("llama_gqa")
    short, long = kv_stores(folder, attention, 16), kv_stores(folder, attention, 64)
    assert set(short) == set(long) == {kind}
    if kind == "WindowStore":
        assert short[kind] == long[kind]
    else:
        assert long[kind] == 4 * short[kind]
    assert kv_stores(folder, attention, 16, prompt=True) == kv_stores(folder, attention, 64, prompt=True) != {}
    assert set(kv_stores(folder, attention, 16, prompt=True)) == {"BlockStore"}


def test_causal_kv_rows_lie_per_batch_and_head(checkpoint):
    """The products permute ``k[l, 0:t+1]`` (t, batch, kv heads, head_dim) to put t after the
    heads, so the block store keeps each (batch, kv head)'s rows contiguous: a read's
    (t, head_dim) panels need no copy, and it holds the values written."""
    folder, _ = checkpoint("llama_gqa")
    blocks = [s for s in run_stores(folder, "causal", 8) if s.kind == "block"]
    assert len(blocks) == 2 and all(s.axis == 2 for s in blocks)
    for store in blocks:
        (key, buffer), = [(k, b) for k, b in store.blocks.items() if k == (0, 0)]
        panel = np.moveaxis(store.read((0, slice(0, 7))), 0, 2)[0, 1]   # (t, head_dim) of batch 0, head 1
        assert panel.flags.c_contiguous and np.shares_memory(panel, buffer)   # (the last step runs no model)
        assert np.array_equal(panel, np.stack([store.read((0, t))[0, 1] for t in range(7)]))
