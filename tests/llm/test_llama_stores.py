"""Keys and values are ordinary RTs: the runtime stores them in a block store for causal
attention and in a window store (memory flat in the length) for window attention."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.sampling import Sampling
from tempo.runtime.executor import Executor


def kv_stores(folder: str, attention: str, length: int):
    model = tpo.llm.Llama.from_pretrained(folder)
    prompt = np.array([[3, 1, 4]], np.int64)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, prompt, Attention.parse(attention), Sampling())
        program = ctx.compile(fetch=[dp.tokens])
    bounds = {"L": model.config.num_layers, "T": length}
    executor = Executor(program.sdg, program.ast, program.backend, bounds, keep={n for n, _ in program.fetch})
    executor.run()
    return {type(s).__name__: s.nbytes() for s in executor.stores.values()
            if type(s).__name__ in ("BlockStore", "WindowStore")}


@pytest.mark.parametrize("attention, kind", [("causal", "BlockStore"), ("window:4", "WindowStore")])
def test_kv_store_follows_the_attention(checkpoint, attention, kind):
    folder, _ = checkpoint("llama_gqa")
    short, long = kv_stores(folder, attention, 16), kv_stores(folder, attention, 64)
    assert set(short) == set(long) == {kind}
    if kind == "WindowStore":
        assert short[kind] == long[kind]
    else:
        assert long[kind] == 4 * short[kind]
