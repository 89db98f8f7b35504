"""A Llama decoder written with recurrent tensors.

Two temporal dims: ``l``, the layer, and ``t``, the position decoded. The
hidden state is one RT ``h[l, t]``: ``h[0, t]`` embeds token ``t`` and
``h[l + 1, t]`` is layer ``l`` applied to ``h[l, t]``, each layer reading its
weights as ``w[l]`` (the checkpoint's tensors stacked over layers), so the
program has one layer whatever the depth. Keys and values are the RTs
``k[l, t]`` and ``v[l, t]``; attention reads ``k[l, 0:t+1]`` (causal) or
``k[l, max(0, t-w+1):t+1]`` (window). There is no cache: the runtime keeps
what these reads need (a block store for the causal read, a window store for
the window, TEMPO §6). Tiled causal attention adds a third dim, the tile
(``tempo.llm.tiling``). The token at ``t + 1`` is the prompt's while the
prompt lasts, then the one picked from the logits at ``t``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tempo as tpo
import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.rope import inverse_frequencies, rotate_half_matrix
from tempo.llm.sampling import Sampling
from tempo.llm.tiling import tiled_attention
from tempo.llm.weights import Weights
from tempo.nn.functional import silu, softmax


@dataclass(frozen=True)
class DecodeProgram:
    """The RTs of one decoding program: ``tokens[t]`` (batch,), int64, the token at ``t``;
    ``logits[t]`` (batch, vocab); ``picked[t]``, the token picked from them (``tokens[t + 1]``
    past the prompt)."""

    tokens: RT
    logits: RT
    picked: RT
    layers: tuple  # (l, L): the layer dim's step and bound symbols
    positions: tuple  # (t, T): the position dim's
    tiles: tuple | None = None  # (n, N): the attention tile dim's, when attention is tiled
    tile: int | None = None

    def bounds(self, num_layers: int, length: int) -> dict:
        """The run's bounds for ``num_layers`` layers and ``length`` positions."""
        out = {self.layers[1]: num_layers, self.positions[1]: length}
        if self.tiles is not None:
            out[self.tiles[1]] = -(-length // self.tile)
        return out


def embed(tokens: RT, table: np.ndarray, position, on_token=None, first: int = 0) -> RT:
    """The rows of ``table`` (vocab, hidden) that ``tokens`` (batch,) name: a host lookup, reading
    ``batch`` rows instead of multiplying a one-hot matrix by the whole table.

    ``on_token(ids, position)`` sees every token from position ``first`` on as it enters the
    model, right after it was picked: the lookup runs in the decoding loop itself.
    """
    def lookup(ids, at):
        if on_token is not None and at >= first:
            on_token(ids, int(at))
        return (table[ids],)

    return F.udf(lookup, [tokens, F.eval_symbol(position)], out_shapes=[(tokens.shape[0], table.shape[1])],
                 out_dtypes=[str(table.dtype)], label="embed")


def rms_norm(x: RT, weight: RT, eps: float) -> RT:
    """``x * (mean(x**2) + eps) ** -0.5 * weight`` over the last axis."""
    return x * (F.mean(x * x, axis=-1, keepdims=True) + eps) ** -0.5 * weight


def rotary(x: RT, cos: RT, sin: RT, rotate: RT) -> RT:
    """Rotate each head of ``x`` (..., heads, head_dim) by its position's angles."""
    return x * cos + F.matmul(x, rotate) * sin


def build(config: LlamaConfig, weights: Weights, prompt: np.ndarray, attention: Attention,
          sampling: Sampling, on_token=None, stop_at_eos: bool = False) -> DecodeProgram:
    """The decoding program for ``prompt`` (batch, prompt length) in the current context;
    ``on_token(ids, position)`` is called with each new token as decoding runs. With
    ``stop_at_eos`` (and end-of-sequence tokens in the config), see :func:`stop_at_eos_tokens`."""
    c = config
    batch, prompt_len = prompt.shape
    ctx = tpo.api.context.current()
    if attention.tile is None:
        (l, L), (t, T) = ctx.dims("l", "t")
        tiles = None
    else:
        (l, L), (t, T), tiles = ctx.dims("l", "t", "n")
    stacked = dict(weights.layers)
    stacked["wqkv"] = np.concatenate([stacked.pop("wq"), stacked.pop("wk"), stacked.pop("wv")], axis=2)
    w = {name: F.from_numpy(a, dims=(l,)) for name, a in stacked.items()}

    tokens = F.placeholder((batch,), "int64", dims=(t,))
    tokens[t < prompt_len] = F.from_numpy(np.ascontiguousarray(prompt.T)).spatial[tpo.min(t, prompt_len - 1)]

    embedded = embed(tokens, weights.embed, t, on_token, prompt_len)
    h = F.placeholder((batch, c.hidden_size), "float32", dims=(l, t))
    h[0, t] = embedded[t]

    angles = F.eval_symbol(t).cast("float32") * F.from_numpy(inverse_frequencies(c.head_dim, c.rope_theta,
                                                                                   c.rope_scaling))
    angles = F.cat([angles, angles], axis=0)
    cos, sin = F.cos(angles), F.sin(angles)
    rotate = F.from_numpy(rotate_half_matrix(c.head_dim))

    x = h[l, t]
    xn = rms_norm(x, w["input_norm"], c.rms_norm_eps)
    heads, kv_heads = c.num_heads, c.num_kv_heads
    qkv = F.reshape(F.matmul(xn, w["wqkv"]), batch, heads + 2 * kv_heads, c.head_dim)   # one product
    qk = rotary(qkv.spatial[:, :heads + kv_heads], cos, sin, rotate)
    q, k, v = qk.spatial[:, :heads], qk.spatial[:, heads:], qkv.spatial[:, heads + kv_heads:]
    qg = F.reshape(q, batch, kv_heads, heads // kv_heads, c.head_dim)
    if tiles is None:
        keys, values = attention.read(k, l, t), attention.read(v, l, t)      # (S, batch, kv heads, head_dim)
        scores = F.matmul(qg, F.permute(keys, 1, 2, 3, 0)) * (c.head_dim ** -0.5)   # (batch, kv, groups, S)
        mixed = F.matmul(softmax(scores, axis=-1), F.permute(values, 1, 2, 0, 3))     # (batch, kv, groups, hd)
    else:
        mixed = tiled_attention(qg, k, v, l, t, tiles[0], attention.tile, c.head_dim ** -0.5)
    x = x + F.matmul(F.reshape(mixed, batch, heads * c.head_dim), w["wo"])
    xn = rms_norm(x, w["post_norm"], c.rms_norm_eps)
    y = x + F.matmul(silu(F.matmul(xn, w["w_gate"])) * F.matmul(xn, w["w_up"]), w["w_down"])
    h[l + 1, t] = y

    out = rms_norm(y[L - 1, t], F.from_numpy(weights.final_norm), c.rms_norm_eps)
    logits = F.matmul(out, F.from_numpy(weights.head))
    picked = sampling.next_token(logits, t)
    if stop_at_eos and c.eos_token_ids:
        picked = stop_at_eos_tokens(picked, c, t, prompt_len)
    tokens[t + 1] = picked[t]
    return DecodeProgram(tokens, logits, picked, (l, L), (t, T), tiles, attention.tile)


def stop_at_eos_tokens(picked: RT, config: LlamaConfig, position, prompt_len: int) -> RT:
    """``picked`` (batch,) over ``position``, as ``transformers``' ``generate`` continues it: a
    sequence that has produced an end-of-sequence token continues with padding, and the run
    ends (``tpo.stop_when``) at the step where every sequence has, before the next model step."""
    t, eos = position, config.eos_token_ids
    pad = config.pad_token_id if config.pad_token_id is not None else eos[0]
    ended = F.placeholder(picked.shape, "bool", dims=(t,))          # an earlier new token was an EOS
    ended[t < prompt_len] = F.full(picked.shape, False, "bool")
    picked = F.where(ended[t], F.full((), pad, "int64"), picked)
    hit = picked == eos[0]
    for other in eos[1:]:
        hit = hit | (picked == other)
    done = ended[t] | hit
    ended[t + 1] = done[t]
    tpo.stop_when(done[t >= prompt_len - 1])
    return picked
