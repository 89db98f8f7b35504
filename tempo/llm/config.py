"""A Llama-family model's hyper-parameters, read from a Hugging Face ``config.json``."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from tempo.errors import TempoError

ARCHITECTURES = ("llama", "mistral")


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes and constants of a Llama/Mistral decoder.

    ``sliding_window``: the attention window of a Mistral-style model (None:
    causal); ``rope_scaling``: the rotary frequencies' scaling (None or a dict
    with ``rope_type`` ``default`` or ``llama3``); ``eos_token_ids``: the
    tokens that end a sequence.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    model_type: str = "llama"
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config.json") -> "LlamaConfig":
        """Validate a ``config.json`` dict; unsupported architectures and missing sizes are TempoErrors."""
        model_type = raw.get("model_type")
        if model_type not in ARCHITECTURES:
            archs = raw.get("architectures") or []
            raise TempoError(f"{source}: unsupported architecture model_type={model_type!r}"
                             f"{' (' + ', '.join(archs) + ')' if archs else ''}; supported: "
                             f"{', '.join(ARCHITECTURES)}")
        if raw.get("hidden_act", "silu") != "silu":
            raise TempoError(f"{source}: unsupported hidden_act {raw['hidden_act']!r}; only silu (SwiGLU)")
        for flag in ("attention_bias", "mlp_bias"):
            if raw.get(flag):
                raise TempoError(f"{source}: {flag}=true is not supported")
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads") if not isinstance(raw.get(k), int) or raw[k] <= 0]
        if missing:
            raise TempoError(f"{source}: missing or invalid {', '.join(missing)}")
        heads = raw["num_attention_heads"]
        kv_heads = raw.get("num_key_value_heads") or heads
        head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
        if heads % kv_heads:
            raise TempoError(f"{source}: num_attention_heads={heads} is not a multiple of "
                             f"num_key_value_heads={kv_heads}")
        if head_dim % 2:
            raise TempoError(f"{source}: head_dim={head_dim} must be even for rotary embeddings")
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "llama3"):
            raise TempoError(f"{source}: unsupported rope type {kind!r}; supported: default, llama3")
        eos = raw.get("eos_token_id")
        eos = () if eos is None else tuple(eos) if isinstance(eos, list) else (int(eos),)
        window = raw.get("sliding_window") if model_type == "mistral" or raw.get("use_sliding_window") else None
        return cls(vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
                   intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
                   num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                   max_positions=int(raw.get("max_position_embeddings", 2048)),
                   rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                   rope_scaling=rope if kind == "llama3" else None,
                   tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                   sliding_window=int(window) if window else None, eos_token_ids=eos,
                   pad_token_id=raw.get("pad_token_id"), model_type=model_type, extra=raw)

    @classmethod
    def from_file(cls, path: str) -> "LlamaConfig":
        """Read and validate ``path`` (a ``config.json``)."""
        try:
            with open(path) as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise TempoError(f"no config.json in {os.path.dirname(path) or '.'}") from None
        except json.JSONDecodeError as err:
            raise TempoError(f"{path} is not valid JSON: {err}") from None
        return cls.from_dict(raw, path)
