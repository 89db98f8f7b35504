"""The prefill chunk by chunk (a dim of the program) against transformers, and its size and memory:
the program does not grow with the prompt, the scores held at once grow with the chunk times the
prompt, not the prompt squared."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

import tempo as tpo
from tempo.errors import TempoError
from tempo.ir import ops
from tempo.llm import program as program_mod
from tempo.llm.sampling import Sampling
from tempo.runtime.backends import numpy_attention
from tempo.symbolic.evaluate import shape_at

IDS = np.random.default_rng(4).integers(0, 160, (2, 23)).astype(np.int64)


def hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize("variant, chunk", [("llama_gqa", 5), ("llama_gqa", 8),
                                            ("llama_gqa", 23), ("mistral_window", 4), ("mistral_window", 9)])
def test_chunked_prefill_logits_match_transformers(checkpoint, variant, chunk):
    """Chunks that do and do not divide the prompt, shorter and longer than the window (6)."""
    folder, hf = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    np.testing.assert_allclose(model.logits(IDS, prefill_chunk=chunk), hf_logits(hf, IDS), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_chunked_prefill_on_other_backends(checkpoint, backend):
    """Chunks of 8 (the last partial) and a window shorter than them, on torch and JAX."""
    pytest.importorskip(backend)
    folder, hf = checkpoint("mistral_window")
    model = tpo.llm.Llama.from_pretrained(folder)
    np.testing.assert_allclose(model.logits(IDS, prefill_chunk=8, backend=backend), hf_logits(hf, IDS),
                               atol=1e-4, rtol=1e-4)


def test_chunked_prefill_then_decoding_gives_the_same_tokens(checkpoint):
    folder, _ = checkpoint("mistral_window")
    model = tpo.llm.Llama.from_pretrained(folder)
    whole = model.generate(IDS, max_new_tokens=8, prefill_chunk=64)
    np.testing.assert_array_equal(model.generate(IDS, max_new_tokens=8, prefill_chunk=3), whole)


def prefill_nodes(prompt_len: int, chunk: int, window: int | None = None) -> tuple:
    """The chunk dim and the nodes of the prefill (those over it) of a program for a prompt of
    ``prompt_len`` tokens in chunks of ``chunk`` (one layer, 2 heads of size 8)."""
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                                 num_heads=2, num_kv_heads=1, head_dim=8, max_positions=1024)
    ids = np.zeros((1, prompt_len), np.int64)
    with tpo.Context() as ctx:
        dp = program_mod.build(config, tpo.llm.Llama.random(config).weights, ids, tpo.llm.Attention(window),
                               Sampling(), prefill_chunk=chunk)
        return dp.chunks[0], [node for node in ctx.sdg.nodes.values() if dp.chunks[0] in node.domain]


def static_sizes(node) -> list[int]:
    return [int(np.prod(shape)) for shape in node.shapes if all(isinstance(s, int) for s in shape)]


@pytest.mark.parametrize("window", [None, 40])
def test_the_prefill_program_does_not_grow_with_the_prompt(window):
    """The prompt's chunks are a dim: the prefill has the same nodes, with the same shapes, for a
    prompt of 4 chunks and of 16 (the last one partial), one attention op; no value it holds has
    the prompt's length, only a chunk's (chunk x 32 at most: the MLP's); the keys it attends to
    are the chunks up to its own, a read whose length is symbolic."""
    (_, short), (_, long) = prefill_nodes(4 * 32, 32, window), prefill_nodes(15 * 32 + 7, 32, window)
    assert [(type(n.op), n.shapes) for n in short] == [(type(n.op), n.shapes) for n in long]
    assert sum(isinstance(n.op, ops.AttentionOp) for n in long) == 1
    assert max(size for node in long for size in static_sizes(node)) <= 32 * 32
    assert any(not isinstance(s, int) for node in long for shape in node.shapes for s in shape)


@pytest.mark.parametrize("window, chunks", [(None, 11), (40, 3), (33, 2)])
def test_a_chunk_reads_the_keys_of_the_chunks_it_sees(window, chunks):
    """Chunk 10's attention (chunks of 32) reads the keys and values of chunks 0 to 10 (causal),
    or of those its window reaches: 3 for a window of 40 (positions 320 - 39 on), 2 for 33."""
    c, nodes = prefill_nodes(15 * 32, 32, window)
    (attention,) = [n for n in nodes if isinstance(n.op, ops.AttentionOp)]
    reads = [shape_at(n.shapes[0], {c.name: 10}) for n in nodes
             if isinstance(n.op, ops.ReshapeOp) and not all(isinstance(s, int) for s in n.shapes[0])]
    assert reads and all(shape[-2] == chunks * 32 for shape in reads)
    assert attention.op.window == (window or 0) and attention.op.last


def peak_bytes(prompt_len: int, chunk: int) -> int:
    """The peak of the allocations traced while a compiled prefill runs (NumPy's included)."""
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=64, intermediate_size=64, num_layers=1,
                                 num_heads=8, num_kv_heads=8, head_dim=8, max_positions=1024)
    model = tpo.llm.Llama.random(config)
    ids = np.random.default_rng(0).integers(0, 32, (1, prompt_len))
    with tpo.Context() as ctx:
        dp = program_mod.build(config, model.weights, ids, model.default_attention(), Sampling(),
                               prefill_chunk=chunk)
        program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, 1))
    tracemalloc.start()
    program.run(dp.bounds(1, 1))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.slow      # prompts of 512 positions run through the reference kernel
def test_prefill_memory_follows_the_chunk_with_numpy_ops(monkeypatch):
    """Without the native kernel (the op's NumPy reference), the peak of NumPy's allocations while
    the prefill runs: 8 heads x 256^2 scores are 2.1 MB; in chunks of 32 rows 0.26 MB at most, and
    twice the prompt takes about twice the memory (each chunk's scores die before the next
    chunk's are made), not four times."""
    monkeypatch.setattr(numpy_attention.KERNELS, "loaded", {"lib": None, "why": "not built in this test"})
    whole, chunked, longer = peak_bytes(256, 256), peak_bytes(256, 32), peak_bytes(512, 32)
    assert whole > 8 * 256 * 256 * 4
    assert chunked < whole / 3
    assert longer < 2.5 * chunked


@pytest.mark.slow
def test_prefill_memory_grows_with_the_prompt_with_the_fused_kernel():
    """With the native kernel, the scores held at once are one piece of rows (at most 1 MB), so
    even the whole prompt as one chunk takes less than its 8 x 512^2 scores (8.4 MB), and
    twice the prompt about twice the memory."""
    if numpy_attention.library() is None:
        pytest.skip(numpy_attention.unavailable())
    whole, longer = peak_bytes(512, 512), peak_bytes(1024, 1024)
    assert whole < 8 * 512 * 512 * 4 / 2
    assert longer < 2.5 * whole


def test_the_prompts_keys_and_values_are_held_once():
    """After a prefill in chunks and a few decoding steps, what the run still holds is about the
    prompt's keys and values once (4 layers x 1,024 positions x 2 heads x 32 x 4 bytes, twice:
    2 MiB): each layer's buffer is filled chunk by chunk in place and decoding reads it as it lies,
    no copy of it in the rows' order, nor the products they were sliced from."""
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=64, intermediate_size=64, num_layers=4,
                                 num_heads=8, num_kv_heads=2, head_dim=32, max_positions=2048)
    model = tpo.llm.Llama.random(config)
    ids = np.random.default_rng(0).integers(0, 32, (1, 1024))
    with tpo.Context() as ctx:
        dp = program_mod.build(config, model.weights, ids, model.default_attention(), Sampling(), prefill_chunk=256)
        program = ctx.compile(fetch=[dp.tokens], passes=program_mod.compile_passes(dp, None, 3))
    tracemalloc.start()
    program.run(dp.bounds(config.num_layers, 3))
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    kv = 2 * config.num_layers * 1024 * config.num_kv_heads * config.head_dim * 4
    assert kv <= held < 1.5 * kv


def test_bad_prefill_chunk_is_an_error():
    config = tpo.llm.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                                 num_heads=2, num_kv_heads=1, head_dim=8, max_positions=64)
    with pytest.raises(TempoError, match="prefill_chunk"):
        tpo.llm.Llama.random(config).generate(np.array([[1, 2]]), 2, prefill_chunk=0)


def test_window_decoding_reads_only_the_prompt_rows_a_window_reaches(checkpoint):
    """With a window of 6 after a prompt of 23, a decoding step scores the prompt's last 5 rows
    (none of its nodes has the prompt's length), and its logits are transformers'."""
    folder, hf = checkpoint("mistral_window")
    model = tpo.llm.Llama.from_pretrained(folder)
    new = 10
    ids = model.generate(IDS, max_new_tokens=new)
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, IDS, model.default_attention(), Sampling())
        t = dp.positions[0]
        assert not any(IDS.shape[1] in shape for node in ctx.sdg.nodes.values() if t in node.domain
                       for shape in node.shapes)
        (logits,) = ctx.run(bounds=dp.bounds(model.config.num_layers, new), fetch=[dp.logits])
    np.testing.assert_allclose(logits[:new - 1].transpose(1, 0, 2), hf_logits(hf, ids)[:, 23:23 + new - 1],
                               atol=1e-4, rtol=1e-4)
