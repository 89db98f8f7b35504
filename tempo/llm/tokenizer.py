"""Tokenizers: a checkpoint's ``tokenizer.json`` through the ``tokenizers`` package."""
from __future__ import annotations

import os

from tempo.errors import TempoError


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
