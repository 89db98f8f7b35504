"""Tokenizers through the ``tokenizers`` package: a folder's ``tokenizer.json``, or the vocabulary
and merges a GGUF file embeds (``tokenizer.ggml.*``)."""
from __future__ import annotations

import os

from tempo.errors import TempoError

# GGUF token types (llama.cpp's): control and user-defined tokens are matched whole, never split
CONTROL, USER_DEFINED = 3, 4
# tokenizer.ggml.pre values whose pre-split is Llama 3's; others get GPT-2's
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*" \
               r"|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_PRE = ("llama-bpe", "llama3", "llama-v3", "smaug-bpe")


def load_tokenizer(folder: str):
    """The ``tokenizers.Tokenizer`` of ``folder/tokenizer.json``, or None when there is none."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.exists(path):
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as err:  # tokenizers raises its own Exception type for malformed files
        raise TempoError(f"{path}: unreadable tokenizer ({err})") from None


def gguf_tokenizer(metadata: dict, source: str):
    """The byte-level BPE tokenizer (``tokenizer.ggml.model`` ``gpt2``) of a GGUF file's metadata:
    its tokens, merges and token types; None when the file has no vocabulary."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise TempoError(f"{source}: unsupported tokenizer tokenizer.ggml.model={kind!r}; supported: gpt2 "
                         f"(byte-level BPE with merges)")
    merges = metadata.get("tokenizer.ggml.merges")
    if not merges:
        raise TempoError(f"{source}: the gpt2 tokenizer has no tokenizer.ggml.merges")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    bpe = models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ", 1)) for m in merges],
                     fuse_unk=False, byte_fallback=False)
    tokenizer = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if metadata.get("tokenizer.ggml.pre") in LLAMA3_PRE:
        split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False)
        byte_level = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                              use_regex=False)])
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata.get("tokenizer.ggml.token_type") or []
    special = [AddedToken(tokens[i], special=True, normalized=False) for i, kind in enumerate(types)
               if kind in (CONTROL, USER_DEFINED)]
    tokenizer.add_special_tokens(special)
    return tokenizer
