"""A Llama decoder written with recurrent tensors.

Three temporal dims: ``l``, the layer, ``c``, a chunk of the prompt, and
``t``, the decoding step. The prompt of ``P`` tokens is prefilled chunk by
chunk (:class:`PromptChunks`: ``P`` in chunks of ``size`` positions, the
last one padded): ``hp[l, c]`` holds chunk ``c``'s positions (batch, size,
hidden), ``hp[l + 1, c]`` is layer ``l`` applied to them, whose attention
reads the keys and values of chunks ``0`` to ``c`` at that layer
(:func:`chunk_attention`, ``kp[l, 0:c+1]``): the chunk is the innermost dim
of ``kp[l, c]``, so its store is one buffer per layer, filled chunk by chunk
in place, and the program is the same whatever ``P``. The chunk dim is not
vectorized (:func:`compile_passes`): the chunks run one after the other.
Step ``t`` decodes position ``P + t``: ``h[0, t]`` embeds its token and
``h[l + 1, t]`` is layer ``l`` applied to ``h[l, t]``. Each layer reads its
weights as ``w[l]`` (the checkpoint's tensors stacked over layers), so the
program has one layer whatever the depth. Decoding's own keys and values are
the RTs ``k[l, t]`` and ``v[l, t]``; attention at step ``t`` reads the
prompt's (``kp[l, 0:C]`` as rows: a view of that buffer) and ``k[l, 0:t+1]``
(causal) or ``k[l, max(0, t-w+1):t+1]`` with the prompt's rows masked to the
window (window). There is no cache: the runtime keeps what these reads need
(a block store for the causal read, a window store for the window, TEMPO §6).
Tiled causal attention adds a fourth dim, the tile (``tempo.llm.tiling``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tempo as tpo
import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.errors import TempoError
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.quantized import QuantizedMatrices
from tempo.llm.rope import inverse_frequencies, rotate_half_matrix
from tempo.llm.sampling import Sampling
from tempo.llm.tiling import Prefix, tiled_attention
from tempo.llm.weights import Panels, Weights
from tempo.nn.functional import silu
from tempo.runtime.backends import get_backend
from tempo.transforms import masked_reads, vectorize


@dataclass(frozen=True)
class DecodeProgram:
    """The RTs of one decoding program for a prompt of ``P`` tokens. ``first`` (batch,), int64:
    the token at position ``P``, picked from the prompt's last logits; ``tokens[t]`` (batch,),
    int64: the token step ``t`` picks, at position ``P + t + 1``; ``logits[t]`` (batch, vocab):
    the logits it is picked from; ``prompt_logits`` (batch, P, vocab): the logits at every prompt
    position. ``ends``: whether the decoding dim ends at run time (``tpo.end_when``) once every
    sequence has produced an end-of-sequence token."""

    first: RT
    tokens: RT
    logits: RT
    prompt_logits: RT
    layers: tuple  # (l, L): the layer dim's step and bound symbols
    positions: tuple  # (t, T): the decoding step's
    chunks: tuple  # (c, C): the prompt chunk's
    chunk_count: int
    tiles: tuple | None = None  # (n, N): the attention tile dim's, when attention is tiled
    tile: int | None = None
    ends: bool = False

    def bounds(self, num_layers: int, new_tokens: int) -> dict:
        """The run's bounds for ``num_layers`` layers and ``new_tokens`` tokens after the prompt:
        ``new_tokens - 1`` decoding steps (the first token comes from the prompt), at least one."""
        steps = max(new_tokens - 1, 1)
        out = {self.layers[1]: num_layers, self.positions[1]: steps, self.chunks[1]: self.chunk_count}
        if self.tiles is not None:
            out[self.tiles[1]] = -(-steps // self.tile)
        return out


def compile_passes(dp: DecodeProgram, backend: str | None, new_tokens: int) -> dict:
    """The pass configs to compile ``dp`` with for ``new_tokens`` tokens on ``backend``. The prompt's
    chunk dim is not vectorized: its chunks run one after the other, so that the prefill holds one
    chunk's activations (vectorized, every chunk would run at once). On a backend that compiles
    loops, the buffers that causal reads become (:mod:`tempo.transforms.masked_reads`) hold the
    run's decoding steps, so that a decoding dim that ends at run time (``stop_at_eos``) keeps its
    loop as one device program too."""
    others = tuple(d.name for d in (dp.layers[0], dp.positions[0], *(dp.tiles or ())[:1]))
    passes = {"vectorize": vectorize.Config(dims=others)}
    if not get_backend(backend).compiles_loops:
        return passes
    steps = dp.bounds(1, new_tokens)[dp.positions[1]]
    return {**passes, "masked_reads": masked_reads.Config(enabled=True, rows={dp.positions[0].name: steps},
                                                          mask_products=get_backend(backend).skips_masked_rows)}


def embed(tokens: RT, table: RT, width: int | None = None) -> RT:
    """The rows of the embedding that ``tokens`` (batch,) name: a gather (``take``) of rows of ``table``
    (vocab, hidden), an IR op on every backend, reading ``batch`` rows instead of multiplying a
    one-hot matrix by the whole table. With ``width``, ``table`` is a tied head's panels (vocab /
    width, hidden, width), whose columns are the embedding's rows (:class:`Panels`): each token's
    panel is gathered, then its column of it."""
    if width is None:
        return F.take(table, tokens, axis=0)
    batch, hidden = tokens.shape[0], table.shape[1]
    blocks = F.take(table, tokens // width, axis=0)                          # (batch, hidden, width)
    rows = F.reshape(F.permute(blocks, 0, 2, 1), batch * width, hidden)
    return F.take(rows, F.from_numpy(np.arange(batch, dtype=np.int64) * width) + tokens % width, axis=0)


def streamed(tokens: RT, step, offset: int, on_token) -> None:
    """Call the host function ``on_token(ids, offset + t)`` with ``tokens[t]`` (batch,) at each step
    ``t`` of the dim of ``step``: a sink, which nothing in the decoding loop reads, so that where the
    loop runs as one device program (greedy masked decoding on JAX) the host calls it after each
    launch, once per step of the launch in order (the tokens reach the host chunk by chunk), and
    elsewhere at each step."""
    tpo.sink(tokens, lambda ids, point: on_token(ids, offset + point[step.name]))


@dataclass(frozen=True)
class QuantizedWeight:
    """A matrix kept quantised (``matrices``, stacked over the layers) read at layer ``layer``
    (None: a matrix of no layer, the output head)."""

    matrices: QuantizedMatrices
    layer: object


def on_host(w: QuantizedWeight, fn, inputs: list, out_features: int) -> RT:
    """``fn(layer, *arrays)`` of ``inputs`` (..., .) as one host function computing from quantised
    matrices at ``w``'s layer (0 for a matrix of no layer): float32 (..., ``out_features``)."""
    shape, label = [(*inputs[0].shape[:-1], out_features)], f"{w.matrices.type_name.lower()}_matmul"
    if w.layer is None:
        return F.udf(lambda *xs: (fn(0, *xs),), inputs, out_shapes=shape, out_dtypes=["float32"], label=label)
    return F.udf(lambda *xs: (fn(int(xs[-1]), *xs[:-1]),), [*inputs, F.eval_symbol(w.layer)],
                 out_shapes=shape, out_dtypes=["float32"], label=label)


def host_rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """:func:`rms_norm` on NumPy arrays, in float32 (the mean as a sum over the count: ``np.mean``'s
    arithmetic without its 2 us of Python)."""
    mean = np.add.reduce(x * x, axis=-1, keepdims=True) / np.float32(x.shape[-1])
    return x * (mean + np.float32(eps)) ** np.float32(-0.5) * weight


def host_silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)`` on a NumPy array, as the NumPy backend computes it."""
    return x * (np.float32(1.0) / (np.float32(1.0) + np.exp(-x)))


def linear(x: RT, w, residual: RT | None = None) -> RT:
    """``x @ w`` (plus ``residual``): a product of RTs, or, for a :class:`QuantizedWeight`, a host
    function computing it from the quantised matrix (:meth:`QuantizedMatrices.matmul`), the
    addition in the same function."""
    if not isinstance(w, QuantizedWeight):
        y = F.matmul(x, w)
        return y if residual is None else residual + y
    m = w.matrices
    if residual is None:
        return on_host(w, lambda layer, xs: m.matmul(xs, layer), [x], m.out_features)
    return on_host(w, lambda layer, xs, rs: rs + m.matmul(xs, layer), [x, residual], m.out_features)


def weight(value, layer=None):
    """A weight as the program reads it, at ``layer`` (None: a weight of no layer): a
    :class:`QuantizedWeight` for quantised matrices; for :class:`Panels`, the matrices put back
    together from them, ``reshape(permute(panels, (1, 0, 2)), (k, n))``, which the compiler's
    ``pack_weights`` pass turns into products of the panels themselves (or puts back at each
    product of many rows: :mod:`tempo.transforms.pack_weights`); else the array, held as it is."""
    if isinstance(value, QuantizedMatrices):
        return QuantizedWeight(value, layer)
    dims = () if layer is None else (layer,)
    if not isinstance(value, Panels):
        return F.from_numpy(value, dims=dims)
    k, n = value.shape[-2:]
    return F.reshape(F.permute(F.from_numpy(value.values, dims=dims), 1, 0, 2), k, n)


def layer_weights(weights: Weights, layer) -> dict:
    """The layers' weights read at ``layer`` (:func:`weight`): RTs, or :class:`QuantizedWeight`
    for matrices kept quantised; the query, key and value matrices as one (``wqkv``), and the
    gate and up matrices too where they are kept quantised in one type (``w_gate_up``)."""
    return {name: weight(value, layer) for name, value in weights.layers.items()}


def rms_norm(x: RT, weight: RT, eps: float) -> RT:
    """``x * (mean(x**2) + eps) ** -0.5 * weight`` over the last axis."""
    return x * (F.mean(x * x, axis=-1, keepdims=True) + eps) ** -0.5 * weight


def rotary(x: RT, cos: RT, sin: RT, rotate: RT) -> RT:
    """Rotate each head of ``x`` (..., heads, head_dim) by its position's angles."""
    return x * cos + F.matmul(x, rotate) * sin


def project(config: LlamaConfig, w: dict, x: RT, cos: RT, sin: RT, rotate: RT) -> tuple[RT, RT, RT]:
    """A layer's queries (..., kv heads, groups, head_dim), keys and values (..., kv heads, head_dim)
    for ``x`` (..., hidden): one product for all three, rotary embeddings on the queries and keys.
    With the matrices kept quantised, the norm, the product and the rotations are one host function
    (:func:`host_project`)."""
    c, lead = config, tuple(x.shape[:-1])
    heads, kv_heads = c.num_heads, c.num_kv_heads
    if isinstance(w["wqkv"], QuantizedWeight):
        return host_project(c, w, x, cos, sin)
    qkv = F.reshape(linear(rms_norm(x, w["input_norm"], c.rms_norm_eps), w["wqkv"]), *lead, heads + 2 * kv_heads,
                    c.head_dim)
    keep = (slice(None),) * len(lead)
    qk = rotary(qkv.spatial[keep + (slice(0, heads + kv_heads),)], cos, sin, rotate)
    q = qk.spatial[keep + (slice(0, heads),)]
    k = qk.spatial[keep + (slice(heads, heads + kv_heads),)]
    v = qkv.spatial[keep + (slice(heads + kv_heads, heads + 2 * kv_heads),)]
    return F.reshape(q, *lead, kv_heads, heads // kv_heads, c.head_dim), k, v


def host_project(config: LlamaConfig, w: dict, x: RT, cos: RT, sin: RT) -> tuple[RT, RT, RT]:
    """:func:`project` as one host function of ``x``, the norm's weights and the angles, computing
    from the quantised query/key/value matrices: one launch, the same arithmetic."""
    c, lead, eps = config, tuple(x.shape[:-1]), config.rms_norm_eps
    heads, kv_heads, head_dim, m = c.num_heads, c.num_kv_heads, c.head_dim, w["wqkv"].matrices
    rotate = rotate_half_matrix(head_dim)

    def qkv(xs, ns, cs, ss, layer):
        y = m.matmul(host_rms_norm(xs, ns, eps), int(layer)).reshape(*xs.shape[:-1], heads + 2 * kv_heads, head_dim)
        qk = y[..., :heads + kv_heads, :]
        qk = qk * cs + (qk.reshape(-1, head_dim) @ rotate).reshape(qk.shape) * ss
        q = qk[..., :heads, :].reshape(*xs.shape[:-1], kv_heads, heads // kv_heads, head_dim)
        return q, qk[..., heads:, :], y[..., heads + kv_heads:, :]

    shapes = [(*lead, kv_heads, heads // kv_heads, head_dim), (*lead, kv_heads, head_dim), (*lead, kv_heads, head_dim)]
    q, k, v = F.udf(qkv, [x, w["input_norm"], cos, sin, F.eval_symbol(w["wqkv"].layer)], out_shapes=shapes,
                    out_dtypes=["float32"] * 3, label=f"{m.type_name.lower()}_matmul")
    return q, k, v


def finish(config: LlamaConfig, w: dict, x: RT, mixed: RT) -> RT:
    """The rest of a layer after attention: ``mixed`` (..., heads * head_dim) projected and added
    to ``x``, then the SwiGLU MLP. With its matrices kept quantised (the gate and up matrices as
    one), all of it is one host function: one launch, the same arithmetic."""
    eps, size = config.rms_norm_eps, config.intermediate_size
    if all(isinstance(w.get(name), QuantizedWeight) for name in ("wo", "w_gate_up", "w_down")):
        wo, gate_up, down = (w[name].matrices for name in ("wo", "w_gate_up", "w_down"))

        def rest(layer, ms, xs, ns):
            xs = xs + wo.matmul(ms, layer)
            both = gate_up.matmul(host_rms_norm(xs, ns, eps), layer)
            return xs + down.matmul(host_silu(both[..., :size]) * both[..., size:], layer)

        return on_host(w["wo"], rest, [mixed, x, w["post_norm"]], config.hidden_size)
    x = linear(mixed, w["wo"], residual=x)
    xn = rms_norm(x, w["post_norm"], eps)
    if "w_gate_up" in w:
        both, keep = linear(xn, w["w_gate_up"]), (slice(None),) * (len(x.shape) - 1)
        gate, up = both.spatial[keep + (slice(0, size),)], both.spatial[keep + (slice(size, 2 * size),)]
    else:
        gate, up = linear(xn, w["w_gate"]), linear(xn, w["w_up"])
    return linear(silu(gate) * up, w["w_down"], residual=x)


PREFILL_CHUNK = 1024  # prompt positions a prefill chunk runs through the layers at once (docs/llm.md: measured)


@dataclass(frozen=True)
class PromptChunks:
    """A prompt of ``length`` positions in ``count`` chunks of ``size`` (the last one padded)."""

    length: int
    size: int

    @property
    def count(self) -> int:
        return -(-self.length // self.size)

    def padded(self, x: np.ndarray) -> np.ndarray:
        """``x`` (batch, P, ...) as (chunks, batch, size, ...), the last chunk's rows after ``P`` zeros."""
        rows = np.zeros((x.shape[0], self.count * self.size, *x.shape[2:]), x.dtype)
        rows[:, :self.length] = x
        return np.swapaxes(rows.reshape(x.shape[0], self.count, self.size, *x.shape[2:]), 0, 1)

    def rows(self, x: RT, layer, first: int, stop: int) -> RT:
        """The prompt rows ``first`` to ``stop`` of ``x`` (batch, size, ...) over (chunk, layer), at
        ``layer``: (batch, stop - first, ...), read from the chunks that hold them."""
        lo, hi = first // self.size, -(-stop // self.size)
        chunks = x[layer, lo:hi]                                           # (hi - lo, batch, size, ...)
        rest = tuple(chunks.shape[3:])
        axes = (1, 0, *range(2, len(chunks.shape)))
        flat = F.reshape(F.permute(chunks, *axes), chunks.shape[1], (hi - lo) * self.size, *rest)
        return flat.spatial[:, first - lo * self.size:stop - lo * self.size]


def chunk_attention(q: RT, k: RT, v: RT, layer, chunk, size: int, window: int | None, scale: float) -> RT:
    """Attention of a prompt chunk's queries ``q`` (batch, size, kv heads, groups, hd) at
    ``(chunk, layer)`` over the keys and values ``k``, ``v`` (batch, size, kv heads, hd) of the
    chunks up to it, ``k[0:chunk+1, layer]`` (with a window, from the first chunk it reaches),
    masked causally (and to the window); (batch, size, heads * hd).

    One attention op (:func:`tempo.api.functional.attention`, its queries the keys' last ``size``
    positions): no value of the program holds the chunk's scores; the op's kernel holds at most
    batch x heads x ``size`` x P of them (NumPy: a piece of rows at a time,
    :mod:`tempo.runtime.backends.numpy_attention`)."""
    l, c = layer, chunk
    batch, _, kv_heads, groups, head_dim = q.shape
    first = 0 if window is None else tpo.max(0, c - -(-(window - 1) // size))

    def span(x: RT) -> RT:                                     # (batch, kv, 1, chunks * size, hd)
        rows = x[l, first:c + 1]                               # (chunks, batch, size, kv, hd)
        flat = F.reshape(F.permute(rows, 1, 3, 0, 2, 4), batch, kv_heads, rows.shape[0] * size, head_dim)
        return F.unsqueeze(flat, 2)

    queries = F.permute(q, 0, 2, 3, 1, 4)                                 # (batch, kv, groups, size, hd)
    mixed = F.attention(queries, span(k), span(v), scale, window=window or 0, last=True)
    return F.reshape(F.permute(mixed, 0, 3, 1, 2, 4), batch, size, kv_heads * groups * head_dim)


def scores_of(q: RT, keys: RT) -> RT:
    """``q @ keys^T`` for ``q`` (batch, kv heads, groups, hd) and ``keys`` (batch, kv heads, S, hd),
    computed as ``keys @ q^T`` and read transposed: one product per head streaming its (S, hd)
    panel of keys as stored, against the query groups as a few columns (on NumPy, from 512
    positions at head size 64, one matrix-vector product per group:
    ``tempo.runtime.backends.numpy._by_rows``)."""
    return F.permute(F.matmul(keys, F.permute(q, 0, 1, 3, 2)), 0, 1, 3, 2)


def kv_buffer(x: RT, layer, position, capacity: int) -> RT:
    """``x[l, 0..t]`` (rows (batch, kv heads, hd)) as a buffer of ``capacity`` rows carried over
    ``t``: ``buffer[l, t]`` is ``buffer[l, t - 1]`` with row ``t`` set to ``x[l, t]`` (rows after
    ``t``: zeros). Its shape is the same at every step, and each step reads only the last
    buffer, so the store holds one buffer per layer (TEMPO Fig. 16's K/V cache as a loop's carry)."""
    l, t = layer, position
    rows = F.from_numpy(np.arange(capacity, dtype=np.int64).reshape(capacity, *(1,) * len(x.shape)))
    previous = F.placeholder((capacity, *x.shape), "float32", dims=(l, t))
    previous[l, 0] = F.zeros((capacity, *x.shape))
    buffer = F.where(rows == F.eval_symbol(t), F.unsqueeze(x, 0), previous[l, t])
    previous[l, t + 1] = buffer[l, t]
    return buffer


def attend(q: RT, prefix: Prefix, keys: RT, values: RT, scale: float, visible: RT | None = None) -> RT:
    """Softmax attention of ``q`` (batch, kv heads, groups, hd) over the prompt's keys and values
    (``prefix``) and decoding's own (``keys``, ``values``: (S, batch, kv heads, hd)), one
    softmax over both: the largest score of either, each part's exponentials against it, summed.
    The products read ``keys`` and ``values`` permuted to (batch, kv heads, ., .), so their block
    store keeps each head's rows contiguous (``tempo.plan.store_choice``). ``visible`` (S,) bool:
    the rows of ``keys`` attended to (None: all)."""
    scores = scores_of(q, F.permute(keys, 1, 2, 0, 3)) * scale             # (batch, kv, groups, S)
    if visible is not None:
        scores = F.where(visible, scores, F.full((), -np.inf, "float32"))
    prompt = prefix.scores(q)                                                # (batch, kv, groups, P)
    top = F.maximum(F.max(scores, axis=-1, keepdims=True), F.max(prompt, axis=-1, keepdims=True))
    weights, prompt = F.exp(scores - top), F.exp(prompt - top)
    total = F.sum(weights, axis=-1, keepdims=True) + F.sum(prompt, axis=-1, keepdims=True)
    mixed = F.matmul(weights, F.permute(values, 1, 2, 0, 3)) + F.matmul(prompt, prefix.values)
    return mixed / total


def build(config: LlamaConfig, weights: Weights, prompt: np.ndarray, attention: Attention,
          sampling: Sampling, on_token=None, stop_at_eos: bool = False,
          stop_tokens: tuple | None = None,
          prefill_chunk: int = PREFILL_CHUNK, capacity: int | None = None) -> DecodeProgram:
    """The decoding program for ``prompt`` (batch, P) in the current context (see the module
    docstring). ``on_token(ids, position)``, if given, is called with each token that enters a
    decoding step, in order (:func:`streamed`: a sink of the decoding loop). With ``stop_at_eos``, the
    decoding dim ends (``tpo.end_when``) at the step where every sequence has produced one of
    ``stop_tokens`` (default: the config's end-of-sequence tokens; :func:`end_of_sequence`);
    without, it runs to its bound. ``prefill_chunk``: the prompt positions a step of the prefill's
    chunk dim runs through the layers (:func:`chunk_attention`). ``capacity``: the
    most decoding steps, the rows of masked attention's buffers (:func:`kv_buffer`)."""
    c = config
    batch, prompt_len = prompt.shape
    if attention.masked and capacity is None:
        raise TempoError("masked attention needs the most decoding steps (capacity), the rows of its buffers")
    ctx = tpo.api.context.current()
    if attention.tile is None:
        (l, L), (ck, CK), (t, T) = ctx.dims("l", "c", "t")
        tiles = None
    else:
        (l, L), (ck, CK), (t, T), tiles = ctx.dims("l", "c", "t", "n")
    chunks = PromptChunks(prompt_len, min(prefill_chunk, prompt_len))
    w = layer_weights(weights, l)
    inv = inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
    rotate = F.from_numpy(rotate_half_matrix(c.head_dim))
    scale = c.head_dim ** -0.5
    final_norm = F.from_numpy(weights.final_norm)
    tied = weights.tied and isinstance(weights.head, Panels)
    table = F.from_numpy(weights.embed.values if tied else weights.embed)   # a tied head's panels: one constant
    if tied:
        head = F.reshape(F.permute(table, 1, 0, 2), *weights.head.shape)
    elif weights.tied:
        head = F.permute(table, 1, 0)                                      # the embedding read transposed
    else:
        head = weight(weights.head)

    def logits_of(y: RT) -> RT:
        return linear(rms_norm(y, final_norm, c.rms_norm_eps), head)

    # the prompt, chunk by chunk: chunk c runs every layer on its rows
    size = chunks.size
    angles = np.arange(prompt_len, dtype=np.float32)[None, :, None] * inv[None, None, :]
    angles = chunks.padded(np.concatenate([angles, angles], axis=2))[:, 0, :, None, :]   # (chunks, size, 1, hd)
    hp = F.placeholder((batch, size, c.hidden_size), "float32", dims=(l, ck))
    hp[0, ck] = F.from_numpy(chunks.padded(weights.embedding(prompt)), dims=(ck,))[ck]
    xp = hp[l, ck]
    qp, kp, vp = project(c, w, xp, F.from_numpy(np.cos(angles), dims=(ck,)), F.from_numpy(np.sin(angles), dims=(ck,)),
                         rotate)
    yp = finish(c, w, xp, chunk_attention(qp, kp, vp, l, ck, size, attention.window, scale))
    hp[l + 1, ck] = yp
    prompt_logits = logits_of(chunks.rows(yp, L - 1, 0, prompt_len))
    # the last layer's row at the last position, read per chunk and then as one slice: every chunk
    # runs every layer (so each query is read and freed), and every layer output but the last is
    # freed once the next layer has read it (tempo.schedule.memory)
    last = prompt_len - 1
    tail = yp[L - 1, ck].spatial[:, last % size]                          # (batch, hidden) per chunk
    first = sampling.next_token(logits_of(tail[0:chunks.count].spatial[last // size]))

    # decoding: step t reads the token at position P + t and picks the one after it
    inputs = F.placeholder((batch,), "int64", dims=(t,))
    h = F.placeholder((batch, c.hidden_size), "float32", dims=(l, t))
    if on_token is not None:
        streamed(inputs, t, prompt_len, on_token)
    h[0, t] = embed(inputs, table, weights.embed.width if tied else None)[t]
    angles = F.eval_symbol(t + prompt_len).cast("float32") * F.from_numpy(inv)
    angles = F.cat([angles, angles], axis=0)
    x = h[l, t]
    q, k, v = project(c, w, x, F.cos(angles), F.sin(angles), rotate)
    reach = 0 if attention.window is None else min(max(0, prompt_len - attention.window + 1), prompt_len - 1)
    # the prompt rows a step reads: all, or with a window the last w - 1 (those it reaches from any step)
    kp, vp = (chunks.rows(rows, l, reach, prompt_len) for rows in (kp, vp))
    prefix = Prefix(F.permute(kp, 0, 2, 1, 3), F.permute(vp, 0, 2, 1, 3), scale,
                    None if attention.window is None else prompt_len - attention.window + 1 - reach + F.eval_symbol(t))
    if attention.masked:
        rows = F.from_numpy(np.arange(capacity, dtype=np.int64))
        mixed = attend(q, prefix, kv_buffer(k, l, t, capacity)[l, t], kv_buffer(v, l, t, capacity)[l, t], scale,
                       rows <= F.eval_symbol(t))
    elif tiles is None:
        mixed = attend(q, prefix, attention.read(k, l, t), attention.read(v, l, t), scale)
    else:
        mixed = tiled_attention(q, k, v, l, t, tiles[0], attention.tile, scale, prefix)
    y = finish(c, w, x, F.reshape(mixed, batch, c.num_heads * c.head_dim))
    h[l + 1, t] = y

    logits = logits_of(y[L - 1, t])
    picked = sampling.next_token(logits, t)
    inputs[0] = first
    eos = (c.eos_token_ids if stop_tokens is None else tuple(stop_tokens)) if stop_at_eos else ()
    tokens = end_of_sequence(inputs, picked, eos, c.pad_token_id, t)
    inputs[t + 1] = tokens[t]
    return DecodeProgram(first, tokens, logits, prompt_logits, (l, L), (t, T), (ck, CK), chunks.count, tiles,
                         attention.tile, bool(eos))


def end_of_sequence(inputs: RT, picked: RT, eos: tuple, pad: int | None, step) -> RT:
    """The token step ``t`` picks after ``inputs[t]``: ``picked``, continued as ``transformers``'
    ``generate`` does once a sequence has produced one of the tokens ``eos`` (with ``pad``, or the
    first EOS). With ``eos``, the dim of ``step`` ends (``tpo.end_when``) at the first step whose
    token leaves every sequence ended: the step that picks the last EOS is the last step."""
    if not eos:
        return picked
    t = step

    def hit(ids: RT) -> RT:
        out = ids == eos[0]
        for other in eos[1:]:
            out = out | (ids == other)
        return out

    seen = hit(inputs)
    ended = F.placeholder(inputs.shape, "bool", dims=(t,))          # an EOS among inputs[0..t]
    ended[0] = seen[0]
    ended[t + 1] = ended[t] | seen[t + 1]
    tpo.end_when(ended[t] | hit(picked))
    return F.where(ended[t], F.full((), eos[0] if pad is None else pad, "int64"), picked)
