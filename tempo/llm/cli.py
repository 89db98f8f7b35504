"""``tempo generate``: decode text with a Llama-family checkpoint, printing it as it is produced."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from tempo.errors import TempoError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tempo generate",
                                     description="Generate text with a Llama/Mistral checkpoint: a Hugging Face "
                                                 "style folder or a GGUF file.")
    parser.add_argument("--model", required=True,
                        help="a .gguf file, or a folder with config.json, model.safetensors, tokenizer.json")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="the prompt text (needs a tokenizer); with --chat, one user message")
    source.add_argument("--prompt-ids", help="the prompt as comma-separated token ids")
    parser.add_argument("--chat", action="store_true",
                        help="chat: each stdin line is a user message, put through the model's chat template; "
                             "the reply streams to stdout and ends at the template's end-of-turn token")
    parser.add_argument("--system", default=None, help="with --chat: a system message first")
    parser.add_argument("--quantized", action="store_true",
                        help="GGUF: keep Q8_0/Q4_0/Q4_1/Q4_K/Q6_K matrices quantised and compute from them (NumPy)")
    parser.add_argument("--int8-inputs", action="store_true",
                        help="with --quantized: round each product's inputs to 8 bits per block of 32, as llama.cpp "
                             "does (integer dot products: faster where AVX512-VNNI is there; logits differ slightly)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--attention", default=None,
                        help="'causal', 'window:W', 'tiled:Z', 'tiled' (Z chosen by measurement; the choice "
                             "is printed to stderr) or 'masked' (causal over fixed-size buffers: one compile per "
                             "island on JAX) (default: the checkpoint's own)")
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
        raise TempoError(f"{ns.model} has no tokenizer (tokenizer.json or a GGUF vocabulary); "
                         f"give the prompt as --prompt-ids")
    return np.array([model.tokenizer.encode(ns.prompt).ids], np.int64)


def _chat(model, ns, stdin, out) -> None:
    """The interactive loop: each stdin line is a user message; the reply streams to ``out``."""
    messages = [{"role": "system", "content": ns.system}] if ns.system else []
    if ns.prompt is not None:
        stdin = [ns.prompt]
    for line in stdin:
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line.rstrip("\n")})
        reply = model.chat(messages, max_new_tokens=ns.max_new_tokens, on_text=lambda piece: _write(out, piece),
                           **_options(ns))
        messages.append({"role": "assistant", "content": reply})
        out.write("\n")
        out.flush()


def _write(out, piece: str) -> None:
    out.write(piece)
    out.flush()


def _options(ns) -> dict:
    return dict(attention=ns.attention, do_sample=ns.sample, temperature=ns.temperature, top_k=ns.top_k,
                top_p=ns.top_p, seed=ns.seed, backend=ns.backend)


def main(argv: Sequence[str]) -> int:
    """``tempo generate --model PATH --prompt TEXT ...`` or ``--chat``; a TempoError is one line and
    exit code 1."""
    from tempo.llm.chat import TextStream
    from tempo.llm.model import Llama

    ns = _parser().parse_args(list(argv))
    try:
        model = Llama.from_pretrained(ns.model, quantized=ns.quantized, int8_inputs=ns.int8_inputs)
        if ns.chat:
            _chat(model, ns, sys.stdin, sys.stdout)
            return 0
        if ns.prompt is None and ns.prompt_ids is None:
            raise TempoError("give --prompt, --prompt-ids or --chat")
        prompt = _prompt(model, ns)
        stream = TextStream(model.tokenizer, model.config.eos_token_ids, lambda piece: _write(sys.stdout, piece))
        model.generate(prompt, max_new_tokens=ns.max_new_tokens, on_token=stream, **_options(ns))
        stream.finish()
        for choice in model.tile_choices.values():
            print(f"tempo: attention {choice}", file=sys.stderr)
    except TempoError as err:
        print(f"tempo: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    print()
    return 0
