"""Chat: the checkpoint's template rendered as transformers renders it, replies ending at the
template's end-of-turn token, and ``tempo generate --chat`` reading stdin."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tokenizers import Tokenizer, models

import tempo as tpo
from tempo.errors import TempoError
from tempo.llm.chat import ChatTemplate

import tiny_gguf
from test_llama_gguf import hf_tiny

transformers = pytest.importorskip("transformers")

CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hell o"}, {"role": "user", "content": "where?"}]
LLAMA3_STYLE = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n'"
                " + m['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def ends_turn_early(tmp_path):
    """A GGUF file whose model says <|im_end|> within three tokens of a chat reply: its head row
    for <|im_end|> is the head row of the token the model picks third, scaled up by 5%."""
    source = hf_tiny(seed=3)
    plain = tmp_path / "plain.gguf"
    tiny_gguf.write(plain, source, "Q8_0")
    model = tpo.llm.Llama.from_pretrained(str(plain))
    ids = model.tokenizer.encode(model.chat_template.render(CONVERSATION[:2]), add_special_tokens=False).ids
    third = model.generate([ids], max_new_tokens=3, stop_at_eos=False)[0, -1]
    end = tiny_gguf.vocabulary()[0].index("<|im_end|>")

    def override(head):
        head[end] = head[third] * 1.05
        return head

    path = tmp_path / "chat.gguf"
    tiny_gguf.write(path, source, "Q8_0", head_override=override)
    return path, end


def test_the_template_renders_as_transformers_apply_chat_template(tmp_path):
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), "F16")
    model = tpo.llm.Llama.from_pretrained(str(path))
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    for prompt in (True, False):
        assert model.chat_template.render(CONVERSATION, add_generation_prompt=prompt) == \
            reference.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=prompt)
    assert model.end_of_turn_ids()[0] == tiny_gguf.vocabulary()[0].index("<|im_end|>")


def test_a_llama3_style_template_with_bos_from_a_folder(checkpoint):
    folder, _ = checkpoint("llama")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": LLAMA3_STYLE, "bos_token": "<|begin_of_text|>", "eos_token": "w1"}, f)
    template = tpo.llm.Llama.from_pretrained(folder).chat_template
    expected = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0}, "a")),
                                                    chat_template=LLAMA3_STYLE, bos_token="<|begin_of_text|>")
    assert template.render(CONVERSATION) == expected.apply_chat_template(CONVERSATION, tokenize=False,
                                                                         add_generation_prompt=True)
    assert template.end_of_turn() == "<|eot_id|>"


def test_chat_stops_at_the_end_of_turn_token_and_streams(tmp_path):
    path, end = ends_turn_early(tmp_path)
    model = tpo.llm.Llama.from_pretrained(str(path))
    ids = model.tokenizer.encode(model.chat_template.render(CONVERSATION[:2]), add_special_tokens=False).ids
    free = model.generate([ids], max_new_tokens=8, stop_at_eos=False)[0, len(ids):].tolist()
    assert end in free[:3]
    pieces = []
    reply = model.chat(CONVERSATION[:2], max_new_tokens=8, on_text=pieces.append)
    assert reply == model.tokenizer.decode(free[:free.index(end)]) == "".join(pieces)


def test_chat_errors(tmp_path):
    path = tmp_path / "m.gguf"
    tiny_gguf.write(path, hf_tiny(), "Q8_0", template="{{ raise_exception('only user turns') }}")
    model = tpo.llm.Llama.from_pretrained(str(path))
    with pytest.raises(TempoError, match="only user turns"):
        model.chat(CONVERSATION)
    with pytest.raises(TempoError, match="'role' and 'content'"):
        model.chat([{"text": "hi"}])
    with pytest.raises(TempoError, match="does not parse"):
        ChatTemplate("{% for %}").render(CONVERSATION)


def test_the_cli_chat_loop_reads_stdin_and_streams_each_reply(tmp_path):
    """``tempo generate --model FILE.gguf --chat`` (the README's command): two stdin lines, two
    replies, each the model's chat() answer to the conversation so far."""
    path, _ = ends_turn_early(tmp_path)
    out = subprocess.run([sys.executable, "-m", "tempo", "generate", "--model", str(path), "--chat",
                          "--system", "be brief", "--max-new-tokens", "8"],
                         input="hello\nwhere?\n", capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(tpo.__file__)))
    assert out.returncode == 0, out.stderr
    model = tpo.llm.Llama.from_pretrained(str(path))
    messages = [{"role": "system", "content": "be brief"}]
    expected = ""
    for line in ("hello", "where?"):
        messages.append({"role": "user", "content": line})
        reply = model.chat(messages, max_new_tokens=8)
        messages.append({"role": "assistant", "content": reply})
        expected += reply + "\n"
    assert out.stdout == expected
