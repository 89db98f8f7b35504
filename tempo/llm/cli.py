"""``tempo generate``: decode text with a Llama-family checkpoint, printing it as it is produced."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from tempo.errors import TempoError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tempo generate",
                                     description="Generate text with a Hugging Face style Llama/Mistral folder.")
    parser.add_argument("--model", required=True, help="folder with config.json, model.safetensors, tokenizer.json")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text (needs the folder's tokenizer.json)")
    source.add_argument("--prompt-ids", help="the prompt as comma-separated token ids")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--attention", default=None,
                        help="'causal', 'window:W', 'tiled:Z' or 'tiled' (Z chosen by measurement; the choice "
                             "is printed to stderr) (default: the checkpoint's own)")
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _prompt(model, ns) -> np.ndarray:
    if ns.prompt_ids is not None:
        try:
            return np.array([[int(x) for x in ns.prompt_ids.split(",")]], np.int64)
        except ValueError:
            raise TempoError(f"--prompt-ids must be comma-separated integers, not {ns.prompt_ids!r}") from None
    if model.tokenizer is None:
        raise TempoError(f"{ns.model} has no tokenizer.json; give the prompt as --prompt-ids")
    return np.array([model.tokenizer.encode(ns.prompt).ids], np.int64)


class _Printer:
    """Prints each new token as it is produced: text when there is a tokenizer, else ids."""

    def __init__(self, model, out) -> None:
        self.model, self.out = model, out
        self.ids: list[int] = []
        self.text = ""
        self.done = False

    def __call__(self, tokens: np.ndarray, position: int) -> None:
        if self.done:
            return
        token = int(tokens[0])
        self.done = token in self.model.config.eos_token_ids
        if self.done:
            return
        self.ids.append(token)
        if self.model.tokenizer is None:
            self.out.write(f"{token} ")
        else:
            text = self.model.tokenizer.decode(self.ids)
            self.out.write(text[len(self.text):])
            self.text = text
        self.out.flush()


def main(argv: Sequence[str]) -> int:
    """``tempo generate --model DIR --prompt TEXT ...``; a TempoError is one line and exit code 1."""
    from tempo.llm.model import Llama

    ns = _parser().parse_args(list(argv))
    try:
        model = Llama.from_pretrained(ns.model)
        prompt = _prompt(model, ns)
        model.generate(prompt, max_new_tokens=ns.max_new_tokens, attention=ns.attention, do_sample=ns.sample,
                       temperature=ns.temperature, top_k=ns.top_k, top_p=ns.top_p, seed=ns.seed,
                       backend=ns.backend, on_token=_Printer(model, sys.stdout))
        for choice in model.tile_choices.values():
            print(f"tempo: attention {choice}", file=sys.stderr)
    except TempoError as err:
        print(f"tempo: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    print()
    return 0
