"""Tokenizers through the ``tokenizers`` package: a folder's ``tokenizer.json``, or the vocabulary
a GGUF file embeds (``tokenizer.ggml.*``): byte-level BPE (``gpt2``) or SentencePiece-style BPE
(``llama``)."""
from __future__ import annotations

import os

from tempo.errors import TempoError

# GGUF token types (llama.cpp's): control and user-defined tokens are matched whole, never split
UNKNOWN, CONTROL, USER_DEFINED = 2, 3, 4
SPACE = "\u2581"  # SentencePiece's spelling of a space
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
    """The tokenizer of a GGUF file's metadata (``tokenizer.ggml.model``: ``gpt2``, byte-level BPE
    with merges; ``llama``, SentencePiece-style BPE with scores), its control and user-defined
    tokens matched whole; None when the file has no vocabulary."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in BUILDERS:
        raise TempoError(f"{source}: unsupported tokenizer tokenizer.ggml.model={kind!r}; supported: gpt2 "
                         f"(byte-level BPE with merges), llama (SentencePiece-style BPE with scores)")
    from tokenizers import AddedToken

    tokenizer = BUILDERS[kind](tokens, metadata, source)
    types = metadata.get("tokenizer.ggml.token_type") or []
    special = [AddedToken(tokens[i], special=True, normalized=False) for i, kind in enumerate(types)
               if kind in (CONTROL, USER_DEFINED)]
    tokenizer.add_special_tokens(special)
    return tokenizer


def byte_level_bpe(tokens: list[str], metadata: dict, source: str):
    """GPT-2's byte-level BPE: the file's merges, GPT-2's pre-split (Llama 3's for its ``pre``)."""
    merges = metadata.get("tokenizer.ggml.merges")
    if not merges:
        raise TempoError(f"{source}: the gpt2 tokenizer has no tokenizer.ggml.merges")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

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
    return tokenizer


def sentencepiece_bpe(tokens: list[str], metadata: dict, source: str):
    """SentencePiece's BPE as llama.cpp and ``transformers`` read it: spaces spelled ``\u2581``
    and one before the text (``tokenizer.ggml.add_space_prefix``, default on), pieces merged in
    the order of the merged piece's score (``tokenizer.ggml.merges`` when the file has them),
    a character outside the vocabulary as its UTF-8 byte tokens ``<0xNN>``."""
    scores = metadata.get("tokenizer.ggml.scores")
    merges = metadata.get("tokenizer.ggml.merges")
    if merges:
        pairs = [tuple(m.split(" ", 1)) for m in merges]
    elif scores is None or len(scores) != len(tokens):
        raise TempoError(f"{source}: the llama tokenizer has neither tokenizer.ggml.merges nor a score per token "
                         f"(tokenizer.ggml.scores)")
    else:
        pairs = scored_merges(tokens, [float(s) for s in scores])
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    types = list(metadata.get("tokenizer.ggml.token_type") or [])
    unknown = metadata.get("tokenizer.ggml.unknown_token_id", types.index(UNKNOWN) if UNKNOWN in types else None)
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, pairs, fuse_unk=True, byte_fallback=True,
                                     unk_token=None if unknown is None else tokens[int(unknown)]))
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first" if prefix else "never",
                                                       split=False)
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1, right=0)] if prefix else []))
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if bos is not None and metadata.get("tokenizer.ggml.add_bos_token", True):
        from tokenizers import processors

        name = tokens[int(bos)]
        tokenizer.post_processor = processors.TemplateProcessing(single=f"{name} $A", pair=f"{name} $A {name} $B",
                                                                 special_tokens=[(name, int(bos))])
    return tokenizer


def scored_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """The merges a SentencePiece vocabulary implies: every split of a piece into two pieces of the
    vocabulary, the splits of higher-scored pieces first (then longer left, then longer right parts),
    as ``transformers`` derives them."""
    index = {t: i for i, t in enumerate(tokens)}
    found = []
    for token, score in dict(zip(tokens, scores)).items():
        pairs = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in index and token[k:] in index]
        pairs.sort(key=lambda p: (index[p[0]], index[p[1]]))
        found.extend((score, left, right) for left, right in pairs)
    found.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
    return [(left, right) for _, left, right in found]


BUILDERS = {"gpt2": byte_level_bpe, "llama": sentencepiece_bpe}
