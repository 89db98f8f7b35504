"""Causal and window decoding on JAX: the reads ``k[l, 0:t+1]`` and ``k[l, max(0, t-w+1):t+1]``
become buffers of a fixed number of rows read whole and masked (:mod:`tempo.transforms.masked_reads`),
so the loop over ``t`` is one device program; its tokens and logits are NumPy's."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tempo as tpo
from tempo.llm import program as program_mod
from tempo.llm.attention import Attention
from tempo.llm.sampling import Sampling

from test_llama_parity import PROMPT

pytest.importorskip("jax")


def decode(model, prompt: np.ndarray, attention: str, backend: str, lengths: tuple[int, ...]):
    """The tokens, logits and launches of one compiled program run for each number of new tokens."""
    with tpo.Context() as ctx:
        dp = program_mod.build(model.config, model.weights, prompt, Attention.parse(attention), Sampling())
        program = ctx.compile(fetch=[dp.first, dp.tokens, dp.logits], backend=backend)
        runs = []
        for new in lengths:
            bounds = {k.name: v for k, v in dp.bounds(model.config.num_layers, new).items()}
            first, tokens, logits = program.run(bounds)
            runs.append((first, tokens, logits, program.ledger.launches))
        return program, runs


@pytest.mark.slow  # JAX compiles the program's device loops: 5-15 s each on 2 loaded cores
@pytest.mark.parametrize("variant, attention", [("llama_gqa", "causal"), ("mistral_window", "window:6"),
                                                ("llama_gqa", "window:3")])
@pytest.mark.parametrize("batch", [1, 2])
def test_causal_and_window_decoding_on_jax_give_numpy_tokens_and_logits(checkpoint, variant, attention, batch):
    folder, _ = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    prompt = PROMPT[:batch]
    _, [(first, tokens, logits, _)] = decode(model, prompt, attention, "numpy", (14,))
    program, [(got_first, got_tokens, got_logits, _)] = decode(model, prompt, attention, "jax", (14,))
    np.testing.assert_array_equal(got_first, first)
    np.testing.assert_array_equal(got_tokens, tokens)
    np.testing.assert_allclose(got_logits, logits, atol=1e-5, rtol=1e-5)
    assert any(p.nested and p.loop.var == program.plan.main_loop.var for p in program.plan.loops)


@pytest.mark.slow
def test_the_decoding_loop_on_jax_launches_the_same_for_more_tokens(checkpoint):
    """One device program over ``t`` (launches of up to 16 steps): 16 tokens more add one launch at most,
    where NumPy launches each layer's islands at every step."""
    folder, _ = checkpoint("llama_gqa")
    model = tpo.llm.Llama.from_pretrained(folder)
    _, runs = decode(model, PROMPT, "causal", "jax", (12, 28))
    _, numpy_runs = decode(model, PROMPT, "causal", "numpy", (12, 28))
    (short, long), (numpy_short, numpy_long) = [run[3] for run in runs], [run[3] for run in numpy_runs]
    assert long - short <= 1 and numpy_long - numpy_short >= 16 * model.config.num_layers
    np.testing.assert_array_equal(runs[1][1], numpy_runs[1][1])


@pytest.mark.slow
@pytest.mark.parametrize("variant, attention", [("mistral_window", None), ("llama_gqa", "causal")])
def test_decoding_on_jax_stops_at_eos_within_its_device_loop(checkpoint, variant, attention):
    """A window's buffer has ``w`` rows and a causal read's the run's steps (``generate`` gives them:
    ``compile_passes``), so the loop over a dim that ends at run time stays one device program."""
    folder, _ = checkpoint(variant)
    model = tpo.llm.Llama.from_pretrained(folder)
    free = model.generate(PROMPT, max_new_tokens=16, attention=attention, stop_at_eos=False)
    model.config = replace(model.config, eos_token_ids=(int(free[1, 9]),), pad_token_id=0)
    expected = model.generate(PROMPT, max_new_tokens=16, attention=attention)
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=16, attention=attention, backend="jax"),
                                  expected)
    assert any(p.nested and p.end is not None for p in model.last_program.plan.loops)
