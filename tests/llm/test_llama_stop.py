"""Decoding ends at the step where every sequence has produced an end-of-sequence token."""
from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np

import tempo as tpo

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
