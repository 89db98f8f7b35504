"""Static tiling of causal attention (TEMPO §4.3, Fig. 13).

Causal attention at position ``t`` reads ``k[0:t+1]``, whose size changes
every step. Tiled, it reads ``ceil((t + 1) / Z)`` tiles of a static size
``Z``: tile ``n`` is ``k[n*Z:min((n+1)*Z, t+1)]``, zero-padded to ``Z`` rows,
so only the last tile is ever padded. The tile index is a temporal dim
``n``; every tensor computed per tile has a static shape. The padded rows
are masked: ``-inf`` before the max, hence 0 after the exponential, for the
sums and the product with the values. The softmax is assembled from the
tiles' partial results, read as ``x[0:t//Z + 1]`` along ``n``: the largest
score over the tiles, then each tile's exponentials against it, summed.

When the user names no tile size, :func:`choose_tile` measures a few on the
backend at hand (TEMPO §8 leaves this to future work): the smallest tile that
runs within :data:`TOLERANCE` of the fastest.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

import tempo as tpo
import tempo.api.functional as F
from tempo.api.rt import RecurrentTensor as RT
from tempo.api.vjp import pad


@dataclass(frozen=True)
class Prefix:
    """Keys and values that every position attends to besides its own dim's (a prefilled
    prompt's): ``keys`` and ``values`` (batch, kv heads, P, hd); ``visible_from`` (int64 RT or
    None): the first of the P rows a position sees (a window)."""

    keys: RT
    values: RT
    scale: float
    visible_from: RT | None = None

    def scores(self, q: RT) -> RT:
        """``q`` (batch, kv heads, groups, hd) against the keys: (batch, kv heads, groups, P), -inf where not visible."""
        scores = F.permute(F.matmul(self.keys, F.permute(q, 0, 1, 3, 2)), 0, 1, 3, 2) * self.scale
        if self.visible_from is None:
            return scores
        rows = F.from_numpy(np.arange(self.keys.shape[-2], dtype=np.int64))
        return F.where(rows >= self.visible_from, scores, F.full((), -np.inf, "float32"))


def tiled_attention(q: RT, k: RT, v: RT, layer, position, tile, size: int, scale: float,
                    prefix: Prefix | None = None) -> RT:
    """``softmax(q k[0:t+1]^T * scale) v[0:t+1]`` for ``q`` (batch, kv heads, groups, head_dim)
    at ``(layer, position)``, computed over tiles of ``size`` positions along the dim ``tile``;
    with a ``prefix``, its keys and values join the softmax as one more part."""
    l, t, n = layer, position, tile
    live = n * size <= t                                    # the tiles that hold positions up to t

    def tile_of(x: RT) -> RT:
        rows = x[l, n * size:tpo.min(n * size + size, t + 1)]           # (rows <= size, batch, kv, hd)
        return pad(rows, 0, 0, size - (tpo.min(n * size + size, t + 1) - n * size))[live]

    keys, values = tile_of(k), tile_of(v)
    offsets = F.from_numpy(np.arange(size, dtype=np.int64))
    valid = offsets + F.eval_symbol(n * size) <= F.eval_symbol(t)          # (size,): rows at or before t
    scores = F.matmul(q, F.permute(keys, 1, 2, 3, 0)) * scale             # (batch, kv, groups, size)
    scores = F.where(valid, scores, F.full((), -np.inf, "float32"))
    top = F.max(F.max(scores, axis=-1)[l, t, 0:t // size + 1], axis=0)   # over every tile
    if prefix is not None:
        before = prefix.scores(q)
        top = F.maximum(top, F.max(before, axis=-1))
    weights = F.exp(scores - F.unsqueeze(top[l, t], 3))                     # padded rows: exp(-inf) = 0
    total = F.sum(F.sum(weights, axis=-1)[l, t, 0:t // size + 1], axis=0)
    mixed = F.sum(F.matmul(weights, F.permute(values, 1, 2, 0, 3))[l, t, 0:t // size + 1], axis=0)
    if prefix is not None:
        weights = F.exp(before - F.unsqueeze(top, 3))
        total, mixed = total + F.sum(weights, axis=-1), mixed + F.matmul(weights, prefix.values)
    return mixed / F.unsqueeze(total, 3)


CANDIDATES = (16, 32, 64, 128, 256, 512, 1024)
TOLERANCE = 0.05  # a tile within 5% of the fastest counts as reaching its throughput


@dataclass(frozen=True)
class TileChoice:
    """A tile size chosen by :func:`choose_tile`: ``tile``, and ``seconds`` (tile -> seconds
    of one decoding step's tiled attention at ``length`` on ``backend``, measured)."""

    tile: int
    length: int
    backend: str
    seconds: dict = field(compare=False)

    def __str__(self) -> str:
        timings = ", ".join(f"{z}: {s * 1e3:.3f} ms" for z, s in sorted(self.seconds.items()))
        return (f"tiled:{self.tile}, the smallest tile within {TOLERANCE:.0%} of the fastest "
                f"(one step's attention at length {self.length} on {self.backend}: {timings})")


def choose_tile(batch: int, kv_heads: int, groups: int, head_dim: int, length: int, backend: str = "numpy",
                candidates=CANDIDATES, steps: int = 16, repeats: int = 5) -> TileChoice:
    """The tile size for causal attention of these sizes decoded up to ``length``, by measurement.

    A micro-run per candidate (those below ``2 * length``, at least the smallest): tiled
    attention of random queries, keys and values at the positions just before ``length``,
    for ``steps`` positions and for a quarter of them, each run once to warm up (a JIT's
    compile) and then ``repeats`` times, the run with the least process CPU time counting
    (the machine may be shared); the difference is the time of the extra steps, without what
    every run pays once (placing the keys and values).
    The choice is the smallest tile whose time is within :data:`TOLERANCE` of the fastest.
    """
    sizes = [z for z in candidates if z < 2 * length] or [min(candidates)]
    many = max(2, min(steps, length))
    few = max(1, many // 4)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, length, batch, kv_heads, groups, head_dim)).astype(np.float32)
    k, v = (rng.standard_normal((1, length, batch, kv_heads, head_dim)).astype(np.float32) for _ in range(2))

    def run_seconds(size: int, last: int) -> float:
        with tpo.Context() as ctx:
            (l, L), (t, T), (n, N) = ctx.dims("l", "t", "n")
            rts = [F.from_numpy(x, dims=(l, t)) for x in (q, k, v)]
            out = tiled_attention(*rts, l, t, n, size, head_dim ** -0.5)[t >= length - last]
            program = ctx.compile(fetch=[out], backend=backend)
        runs = []
        for _ in range(repeats + 1):
            start = time.process_time()
            program.run({L: 1, T: length, N: math.ceil(length / size)})
            runs.append(time.process_time() - start)
        return min(runs[1:])

    seconds = {z: max(run_seconds(z, many) - run_seconds(z, few), 0.0) / (many - few) for z in sizes}
    fastest = min(seconds.values())
    tile = min(z for z, s in seconds.items() if s <= fastest * (1 + TOLERANCE))
    return TileChoice(tile, length, backend, seconds)
