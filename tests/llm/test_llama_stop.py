"""Decoding ends at the step where every sequence has produced an end-of-sequence token."""
from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest

import tempo as tpo
from tempo.ir.ops import UDFOp

PROMPT = np.array([[5, 17, 99], [11, 0, 150]], np.int64)


def padded_after_eos(ids: np.ndarray, prompt_len: int, eos: int, pad: int) -> np.ndarray:
    """``ids`` as transformers ends them: padding after each row's first new EOS, cut where every row has one."""
    out, ended = ids.copy(), np.zeros(len(ids), bool)
    for t in range(prompt_len, ids.shape[1]):
        out[ended, t] = pad
        ended |= ids[:, t] == eos
        if ended.all():
            return out[:, :t + 1]
    return out


def test_decoding_stops_once_every_sequence_has_ended(checkpoint):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    free = model.generate(PROMPT, max_new_tokens=24, stop_at_eos=False)
    new = free[:, 3:]
    shared = [int(x) for x in np.intersect1d(new[0], new[1])]     # a token both sequences produce
    ends = {x: max(list(row).index(x) for row in new) for x in shared}
    eos, pad = min(ends, key=ends.get), 0             # the one both have produced earliest
    model.config = replace(model.config, eos_token_ids=(eos,), pad_token_id=pad)
    expected = padded_after_eos(free, 3, eos, pad)
    assert expected.shape[1] < free.shape[1]
    steps = []
    ids = model.generate(PROMPT, max_new_tokens=24, on_token=lambda column, position: steps.append(
        (position, any("executor" in f.filename for f in inspect.stack()))))
    np.testing.assert_array_equal(ids, expected)
    # a model step runs for each token but the last: none after every sequence has ended
    assert [p for p, inside in steps if inside] == list(range(3, ids.shape[1] - 1))
    assert [p for p, _ in steps] == list(range(3, ids.shape[1]))
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=24, stop_at_eos=False), free)


def test_decoding_stops_where_transformers_generate_does(checkpoint):
    """``transformers``' ``generate`` with ``eos_token_id`` and ``pad_token_id`` gives the same ids."""
    torch = pytest.importorskip("torch")
    folder, hf = checkpoint("llama")
    model = tpo.llm.Llama.from_pretrained(folder)
    free = model.generate(PROMPT, max_new_tokens=24, stop_at_eos=False)
    eos, pad = shared_eos(free[:, 3:]), 0
    model.config = replace(model.config, eos_token_ids=(eos,), pad_token_id=pad)
    with torch.no_grad():
        expected = hf.generate(torch.tensor(PROMPT), max_new_tokens=24, do_sample=False, eos_token_id=eos,
                               pad_token_id=pad, attention_mask=torch.ones(PROMPT.shape, dtype=torch.long)).numpy()
    assert expected.shape[1] < free.shape[1]
    np.testing.assert_array_equal(model.generate(PROMPT, max_new_tokens=24), expected)


def shared_eos(new: np.ndarray) -> int:
    """A token every row of ``new`` produces, the one whose last first appearance is earliest,
    preferring one that rows first produce at different steps."""
    shared = [int(x) for x in set(new[0]).intersection(*map(set, new[1:]))]
    firsts = {x: [list(row).index(x) for row in new] for x in shared}
    return min(shared, key=lambda x: (len(set(firsts[x])) == 1, max(firsts[x])))


CONFIG = tpo.llm.LlamaConfig(vocab_size=24, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, head_dim=8, max_positions=64)
PROMPTS = np.array([[1, 2, 3], [7, 8, 9], [4, 4, 20]], np.int64)


@pytest.mark.parametrize("every", [1, 3, 8])
def test_a_batch_whose_sequences_end_at_different_steps_runs_the_longest_ones_steps(every):
    """The ids are the fixed-length decoding's cut where every sequence has ended (padded after
    each one's EOS), for every number of steps between reads of the flag; the decoding dim runs
    one step per token after the first, up to the longest sequence's EOS, not ``max_new_tokens``."""
    model = tpo.llm.Llama.random(CONFIG, seed=1)
    new = 40
    free = model.generate(PROMPTS, max_new_tokens=new, stop_at_eos=False)
    assert free.shape[1] - 3 == new
    eos, pad = shared_eos(free[:, 3:]), 0
    firsts = [list(row).index(eos) for row in free[:, 3:]]
    assert len(set(firsts)) > 1 and max(firsts) < new - 1
    model.config = replace(model.config, eos_token_ids=(eos,), pad_token_id=pad)
    ids = model.generate(PROMPTS, max_new_tokens=new, end_check_every=every)
    np.testing.assert_array_equal(ids, padded_after_eos(free, 3, eos, pad))
    assert ids.shape[1] - 3 == max(firsts) + 1
    program = model.last_program
    assert int(program.lengths["T"]) == max(firsts)              # the steps after the first token
    check = program.end_checks["T"]                               # no host code in the loop: read every k steps
    assert max(firsts) <= check.steps < max(firsts) + every       # the steps run past the end are discarded
    assert check.reads == -(-check.steps // every)
    fixed = model.generate(PROMPTS, max_new_tokens=new, stop_at_eos=False)
    np.testing.assert_array_equal(fixed, free)
    assert model.last_program.end_checks == {}                    # no check without stop_at_eos


def test_a_batch_that_ends_at_its_first_token_has_one_new_token():
    model = tpo.llm.Llama.random(CONFIG, seed=1)
    free = model.generate(PROMPTS, max_new_tokens=6, stop_at_eos=False)
    model.config = replace(model.config, eos_token_ids=tuple(int(x) for x in set(free[:, 3])), pad_token_id=0)
    np.testing.assert_array_equal(model.generate(PROMPTS, max_new_tokens=6), free[:, :4])


def test_streaming_tokens_puts_host_code_in_the_loop_so_the_flag_is_read_every_step():
    """Without ``on_token`` the decoding loop holds no host code but the end check (the embedding is a
    ``take``), so the flag is read every ``k`` steps; ``on_token`` is host code in the loop: read every step."""
    model = tpo.llm.Llama.random(CONFIG, seed=1)
    free = model.generate(PROMPTS, max_new_tokens=20, stop_at_eos=False)
    model.config = replace(model.config, eos_token_ids=(shared_eos(free[:, 3:]),), pad_token_id=0)
    quiet = model.generate(PROMPTS, max_new_tokens=20, end_check_every=4)
    labels = sorted(n.op.label for n in model.last_program.sdg.nodes.values() if isinstance(n.op, UDFOp))
    assert labels == ["end_when"]
    check = model.last_program.end_checks["T"]
    assert check.reads == -(-check.steps // 4) < check.steps
    seen = []
    streamed = model.generate(PROMPTS, max_new_tokens=20, end_check_every=4,
                              on_token=lambda column, position: seen.append(position))
    np.testing.assert_array_equal(streamed, quiet)
    assert seen == list(range(3, quiet.shape[1]))
    check = model.last_program.end_checks["T"]
    assert check.reads == check.steps == quiet.shape[1] - 4


@pytest.mark.slow      # the backend compiles every island of the program
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_every_backend_stops_where_numpy_does(backend):
    pytest.importorskip(backend)
    model = tpo.llm.Llama.random(CONFIG, seed=1)
    free = model.generate(PROMPTS, max_new_tokens=30, stop_at_eos=False)
    eos = shared_eos(free[:, 3:])
    model.config = replace(model.config, eos_token_ids=(eos,), pad_token_id=0)
    expected = model.generate(PROMPTS, max_new_tokens=30)
    for every in (None, 4):
        np.testing.assert_array_equal(model.generate(PROMPTS, max_new_tokens=30, backend=backend,
                                                     end_check_every=every), expected)


@pytest.mark.slow      # XLA compiles the decoding loop and the prompt's islands
@pytest.mark.parametrize("every", [None, 4])
def test_masked_decoding_on_jax_runs_its_loop_on_the_device_and_stops_where_numpy_does(every):
    """With masked attention the decoding loop over ``t`` (its loops over layers, the K/V buffers
    carried from step to step, the end check) runs on JAX as launches of ``k`` steps: one host read
    of the flag per launch, no step past the end, the ids NumPy's."""
    pytest.importorskip("jax")
    model = tpo.llm.Llama.random(CONFIG, seed=1)
    free = model.generate(PROMPTS, max_new_tokens=30, stop_at_eos=False)
    eos = shared_eos(free[:, 3:])
    model.config = replace(model.config, eos_token_ids=(eos,), pad_token_id=0)
    expected = model.generate(PROMPTS, max_new_tokens=30, attention="masked")
    host_launches = model.last_program.ledger.launches
    ids = model.generate(PROMPTS, max_new_tokens=30, attention="masked", backend="jax", end_check_every=every)
    np.testing.assert_array_equal(ids, expected)
    program = model.last_program
    assert any(p.nested and p.end is not None for p in program.plan.loops)
    check, steps = program.end_checks["T"], ids.shape[1] - 4
    assert check.steps == steps and check.reads == -(-steps // min(every or 64, 29))
    assert program.ledger.launches < host_launches / 3            # the loop's chunks, the prompt's kernels
