"""Sampled decoding as tensor ops: the distribution it draws from, what top-k and top-p keep,
the same tokens on NumPy and JAX for a seed, and on JAX with masked attention one device loop."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
import tempo.api.functional as F
from tempo.ir.ops import UDFOp
from tempo.llm.sampling import Sampling

LOGITS = np.array([2.0, 1.5, 0.3, 0.0, -0.4, -1.0, -3.0], np.float32)
DRAWS = 20000
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46}   # chi-square's 99.9% quantiles by degrees of freedom


def draws(sampling: Sampling, logits: np.ndarray, rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` independent picks (one per row) from the same ``logits``, on NumPy."""
    with tpo.Context(seed=seed) as ctx:
        picked = sampling.next_token(F.from_numpy(np.tile(logits, (rows, 1))))
        (out,) = ctx.run({}, fetch=[picked])
    return out


def expected(logits: np.ndarray, temperature: float, top_k, top_p) -> np.ndarray:
    """``softmax(logits / temperature)`` over the ``top_k`` largest logits and then the smallest
    set of the largest whose probability reaches ``top_p``, renormalised: the definition."""
    order = np.argsort(-logits, kind="stable")
    z = logits[order].astype(np.float64) / temperature
    keep = np.arange(len(z)) < (len(z) if top_k is None else top_k)
    p = np.where(keep, np.exp(z - z[0]), 0.0)
    p /= p.sum()
    if top_p is not None:
        p = np.where(np.cumsum(p) - p < top_p, p, 0.0)
        p /= p.sum()
    out = np.zeros(len(z))
    out[order] = p
    return out


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.6, None, None), (1.3, 3, None),
                                                     (1.0, None, 0.8), (0.8, 5, 0.9)])
def test_sampled_frequencies_follow_the_softmax(temperature, top_k, top_p):
    sampling = Sampling(greedy=False, temperature=temperature, top_k=top_k, top_p=top_p)
    counts = np.bincount(draws(sampling, LOGITS, DRAWS), minlength=len(LOGITS))
    p = expected(LOGITS, temperature, top_k, top_p)
    assert not counts[p == 0].any()
    e = p[p > 0] * DRAWS
    chi2 = (((counts[p > 0] - e) ** 2) / e).sum()
    assert chi2 < CHI2_999[len(e) - 1]


def test_the_test_rejects_a_wrong_temperature():
    counts = np.bincount(draws(Sampling(greedy=False, temperature=1.0), LOGITS, DRAWS), minlength=len(LOGITS))
    e = expected(LOGITS, 0.6, None, None) * DRAWS
    assert (((counts - e) ** 2) / e).sum() > CHI2_999[len(LOGITS) - 1]


def test_top_k_never_picks_outside_the_k_largest():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3000, 50)).astype(np.float32) * 2
    with tpo.Context(seed=4) as ctx:
        picked = Sampling(greedy=False, temperature=2.0, top_k=4).next_token(F.from_numpy(logits))
        (tokens,) = ctx.run({}, fetch=[picked])
    largest = np.argsort(-logits, axis=1, kind="stable")[:, :4]
    assert (largest == tokens[:, None]).any(axis=1).all()
    assert len(np.unique(tokens)) > 4                      # not one fixed token: the rows differ


def test_top_k_of_one_and_a_tiny_top_p_are_greedy():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(500, 30)).astype(np.float32)
    for sampling in (Sampling(greedy=False, top_k=1), Sampling(greedy=False, top_p=1e-6)):
        with tpo.Context(seed=2) as ctx:
            (tokens,) = ctx.run({}, fetch=[sampling.next_token(F.from_numpy(logits))])
        np.testing.assert_array_equal(tokens, logits.argmax(axis=1))


def tiny_model():
    config = tpo.llm.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                                 num_heads=4, num_kv_heads=2, head_dim=8, max_positions=64)
    return tpo.llm.Llama.random(config, seed=3)


OPTIONS = [dict(temperature=0.9), dict(temperature=0.7, top_k=10, top_p=0.9)]
PROMPT = np.array([[1, 2, 3], [7, 8, 9]])


@pytest.mark.parametrize("options", OPTIONS)
def test_the_same_seed_gives_the_same_tokens_with_every_attention(options):
    model = tiny_model()
    a = model.generate(PROMPT, 16, attention="causal", do_sample=True, seed=5, **options)
    np.testing.assert_array_equal(model.generate(PROMPT, 16, attention="masked", do_sample=True, seed=5, **options), a)
    assert not np.array_equal(model.generate(PROMPT, 16, attention="causal", do_sample=True, seed=6, **options), a)
    assert not np.array_equal(a, model.generate(PROMPT, 16, attention="causal"))       # not the greedy tokens


@pytest.mark.slow      # the JAX backend compiles every island of the program
@pytest.mark.parametrize("options", OPTIONS)
def test_sampled_masked_decoding_on_jax_is_one_device_loop_with_numpy_tokens(options):
    pytest.importorskip("jax")
    model = tiny_model()
    expected_ids = model.generate(PROMPT, 16, attention="masked", do_sample=True, seed=5, **options)
    ids = model.generate(PROMPT, 16, attention="masked", do_sample=True, seed=5, backend="jax", **options)
    np.testing.assert_array_equal(ids, expected_ids)
    program = model.last_program
    assert "the main loop: the whole run" in str(program.plan) and "as one device launch" in program.code



def test_sampled_decoding_reads_its_end_flag_every_k_steps():
    """No host code in the sampled loop but the end check: the flag is read every ``k`` steps,
    and the ids are those of the decoding without a stop, cut at the stop token."""
    model = tiny_model()
    options = dict(do_sample=True, temperature=0.9, top_k=12, seed=5)
    full = model.generate(PROMPT[:1], 24, stop_at_eos=False, **options)
    new = list(full[0, 3:])
    at = next(j for j in range(8, len(new)) if new[j] not in new[:j])       # a token first seen late
    ids = model.generate(PROMPT[:1], 24, stop_tokens=(int(new[at]),), end_check_every=4, **options)
    np.testing.assert_array_equal(ids, full[:, :3 + at + 1])
    labels = sorted(n.op.label for n in model.last_program.sdg.nodes.values() if isinstance(n.op, UDFOp))
    check = model.last_program.end_checks["T"]
    assert labels == ["end_when"] and check.reads == -(-check.steps // 4) < check.steps
