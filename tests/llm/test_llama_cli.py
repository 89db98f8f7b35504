"""``tempo generate``: streams text, and a bad input is one error line with exit code 1."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.cli import main

from conftest import write_tokenizer


def test_generate_prints_the_greedy_continuation(checkpoint, capsys):
    folder, _ = checkpoint("llama_gqa")
    words = write_tokenizer(folder, 160)
    prompt = "w5 w17 w99"
    expected = tpo.llm.Llama.from_pretrained(folder).generate([[5, 17, 99]], max_new_tokens=6)[0, 3:]
    assert main(["generate", "--model", folder, "--prompt", prompt, "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert out.split() == [words[i] for i in expected]


def test_generate_with_ids_and_a_window(checkpoint, capsys):
    folder, _ = checkpoint("llama")
    expected = tpo.llm.Llama.from_pretrained(folder).generate([[1, 2, 3]], max_new_tokens=5,
                                                              attention=("window", 2))[0, 3:]
    assert main(["generate", "--model", folder, "--prompt-ids", "1,2,3", "--max-new-tokens", "5",
                 "--attention", "window:2"]) == 0
    assert [int(x) for x in capsys.readouterr().out.split()] == expected.tolist()


def test_generate_errors_are_one_line(checkpoint, capsys, tmp_path):
    folder, _ = checkpoint("llama")
    capsys.readouterr()
    cases = [["--model", str(tmp_path / "none"), "--prompt-ids", "1"],
             ["--model", folder, "--prompt", "hello"],                         # no tokenizer.json
             ["--model", folder, "--prompt-ids", "1,999"],
             ["--model", folder, "--prompt-ids", "1", "--attention", "window:zero"],
             ["--model", folder, "--prompt-ids", "1", "--max-new-tokens", "1000"]]
    for args in cases:
        assert main(["generate", *args]) == 1
        err = capsys.readouterr().err
        assert err.startswith("tempo: error: ") and err.count("\n") == 1, err


def test_sampling_is_deterministic_given_the_seed(checkpoint):
    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    options = dict(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=20, top_p=0.9)
    a = model.generate([[1, 2, 3], [4, 5, 6]], seed=1, **options)
    b = model.generate([[1, 2, 3], [4, 5, 6]], seed=1, **options)
    c = model.generate([[1, 2, 3], [4, 5, 6]], seed=2, **options)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 15) and not np.array_equal(a, c)


def test_on_token_streams_from_inside_the_decoding_loop(checkpoint):
    import inspect

    model = tpo.llm.Llama.from_pretrained(checkpoint("llama")[0])
    calls = []
    ids = model.generate([[1, 2, 3]], max_new_tokens=6,
                         on_token=lambda column, position: calls.append(
                             (position, column.tolist(), any("executor" in f.filename for f in inspect.stack()))))
    assert [(p, c) for p, c, _ in calls] == [(p, ids[:, p].tolist()) for p in range(3, 9)]
    assert all(inside for _, _, inside in calls[:-1])     # all but the last token enter a model step
