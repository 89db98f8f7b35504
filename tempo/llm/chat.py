"""Chat templates: a checkpoint's Jinja template turning messages into the prompt text.

The template is ``tokenizer_config.json``'s ``chat_template`` (or a folder's
``chat_template.jinja``) or a GGUF file's ``tokenizer.chat_template``; it is
rendered with ``jinja2`` the way ``transformers``' ``apply_chat_template``
renders it (a sandboxed environment, ``trim_blocks`` and ``lstrip_blocks``,
loop controls, ``raise_exception``, ``strftime_now`` and a ``tojson`` that keeps
non-ASCII text), with ``messages``, ``add_generation_prompt``, ``bos_token`` and
``eos_token``.
"""
from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from functools import cached_property

from tempo.errors import TempoError


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


@dataclass(frozen=True)
class ChatTemplate:
    """``source``: the Jinja text; ``bos_token`` and ``eos_token``: the texts the template may use."""

    source: str
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_folder(cls, folder: str) -> "ChatTemplate | None":
        """``folder``'s template: ``chat_template.jinja`` or ``tokenizer_config.json``'s; None if neither."""
        config = {}
        path = os.path.join(folder, "tokenizer_config.json")
        if os.path.exists(path):
            try:
                with open(path) as f:
                    config = json.load(f)
            except json.JSONDecodeError as err:
                raise TempoError(f"{path} is not valid JSON: {err}") from None
        source = config.get("chat_template")
        jinja = os.path.join(folder, "chat_template.jinja")
        if os.path.exists(jinja):
            with open(jinja) as f:
                source = f.read()
        if isinstance(source, list):      # named templates: the default one
            source = {t.get("name"): t.get("template") for t in source}.get("default")
        if not source:
            return None
        return cls(source, _token_text(config.get("bos_token")) or "", _token_text(config.get("eos_token")) or "")

    @classmethod
    def from_gguf(cls, metadata: dict) -> "ChatTemplate | None":
        """A GGUF file's ``tokenizer.chat_template``, with its BOS and EOS tokens' texts; None if none."""
        source = metadata.get("tokenizer.chat_template")
        if not source:
            return None
        tokens = metadata.get("tokenizer.ggml.tokens") or []

        def text(key: str) -> str:
            index = metadata.get(key)
            return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else ""

        return cls(source, text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id"))

    @cached_property
    def _compiled(self):
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TempoError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
            x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            return env.from_string(self.source)
        except jinja2.TemplateError as err:
            raise TempoError(f"chat template does not parse: {err}") from None

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (dicts with ``role`` and ``content``)."""
        import jinja2

        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise TempoError(f"a chat message is a dict with 'role' and 'content', not {m!r}")
        try:
            return self._compiled.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except jinja2.TemplateError as err:
            raise TempoError(f"chat template failed: {err}") from None

    def end_of_turn(self) -> str:
        """The text the template puts right after an assistant's message (e.g. ``<|im_end|>``):
        rendered around a marker message, what follows the marker up to the next line."""
        marker = "\x00tempo-turn\x00"
        text = self.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}],
                           add_generation_prompt=False)
        after = text.split(marker, 1)[1] if marker in text else ""
        return after.split("\n", 1)[0]


class TextStream:
    """An ``on_token`` callback for :meth:`tempo.llm.Llama.generate` (batch 1) that collects the
    new tokens until one of ``stops`` and hands each new piece of their text to ``write``: the
    decoded text's growth (a byte-level token may end mid-character), or the ids when there is
    no ``tokenizer``."""

    def __init__(self, tokenizer, stops: tuple[int, ...], write=None) -> None:
        self.tokenizer, self.stops, self.write = tokenizer, tuple(stops), write
        self.ids: list[int] = []
        self.text = ""
        self.done = False

    def __call__(self, tokens, position: int) -> None:
        token = int(tokens[0])
        if self.done:
            return
        if token in self.stops:
            self.finish()
            return
        self.ids.append(token)
        if self.tokenizer is None:
            self._emit(self.text + f"{token} ")
            return
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):          # else an incomplete character: wait for its other bytes
            self._emit(text)

    def finish(self) -> None:
        """End the stream: hand out any text still held back (an incomplete character as decoded)."""
        if not self.done and self.tokenizer is not None:
            self._emit(self.tokenizer.decode(self.ids))
        self.done = True

    def _emit(self, text: str) -> None:
        piece, self.text = text[len(self.text):], text
        if piece and self.write is not None:
            self.write(piece)
