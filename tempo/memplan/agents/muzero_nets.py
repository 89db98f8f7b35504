"""MMap-MuZero's networks in JAX: representation, dynamics, reward, value and policy (§4.3.1).

The representation encoder averages the 128x128 memory map down to 32x32
(4x4 blocks; convolutions at full resolution cost more than all the rest on a
CPU) and runs a residual convolution stack over it and embeds each other feature group (buffers, memory
profile, supply, action features, globals) with its own layer; the embeddings
are concatenated and an MLP gives the latent state. Dynamics maps (latent,
action) to the next latent and a categorical reward; prediction gives policy
logits and a categorical value. Scalars use MuZero's ``h(x)`` transform and a
two-hot encoding over the integer support ``[-SUPPORT, SUPPORT]``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tempo.memplan.features import SHAPES

SUPPORT = 20
BINS = 2 * SUPPORT + 1
LATENT = 128
CHANNELS = 8
VECTOR_GROUPS = ("buffers", "memory_profile", "supply", "actions", "globals")
EMBED = {"buffers": 64, "memory_profile": 32, "supply": 32, "actions": 32, "globals": 16}


def _dense(rng: np.random.Generator, n_in: int, n_out: int) -> dict:
    w = rng.normal(0.0, np.sqrt(2.0 / n_in), (n_in, n_out)).astype(np.float32)
    return {"w": jnp.asarray(w), "b": jnp.zeros(n_out)}


def _conv(rng: np.random.Generator, c_in: int, c_out: int) -> jnp.ndarray:
    return jnp.asarray(rng.normal(0.0, np.sqrt(2.0 / (9 * c_in)),
                                  (3, 3, c_in, c_out)).astype(np.float32))


def init_params(seed: int) -> dict:
    """Fresh parameters of all networks (He initialisation, drawn with NumPy)."""
    rng = np.random.default_rng(seed)
    k = iter([rng] * 32)
    sizes = {name: int(np.prod(SHAPES[name])) for name in VECTOR_GROUPS}
    conv_out = (SHAPES["memory_map"][0] // 16) ** 2 * CHANNELS
    joint = 64 + sum(EMBED.values())
    return {
        "conv_in": _conv(next(k), 1, CHANNELS),
        "res1": _conv(next(k), CHANNELS, CHANNELS),
        "res2": _conv(next(k), CHANNELS, CHANNELS),
        "map": _dense(next(k), conv_out, 64),
        "embed": {name: _dense(next(k), sizes[name], EMBED[name]) for name in VECTOR_GROUPS},
        "rep1": _dense(next(k), joint, LATENT),
        "rep2": _dense(next(k), LATENT, LATENT),
        "dyn1": _dense(next(k), LATENT + 3, LATENT),
        "dyn2": _dense(next(k), LATENT, LATENT),
        "reward1": _dense(next(k), LATENT + 3, 64),
        "reward2": _dense(next(k), 64, BINS),
        "policy1": _dense(next(k), LATENT, 64),
        "policy2": _dense(next(k), 64, 3),
        "value1": _dense(next(k), LATENT, 64),
        "value2": _dense(next(k), 64, BINS),
    }


def _apply(layer: dict, x):
    return x @ layer["w"] + layer["b"]


def _conv2d(x, w, stride: int = 1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _pool(x, k: int):
    """Average ``k x k`` blocks of a batch of NHWC images."""
    n, h, w, c = x.shape
    return x.reshape(n, h // k, k, w // k, k, c).mean((2, 4))


def _scale(h):
    """Min-max normalise each latent to [0, 1] (as MuZero does)."""
    lo, hi = h.min(-1, keepdims=True), h.max(-1, keepdims=True)
    return (h - lo) / (hi - lo + 1e-6)


def represent(params: dict, obs: dict):
    """Latent state of a batch of observations (dict of arrays with a leading batch axis)."""
    x = _pool(obs["memory_map"][..., None], 4)
    x = jax.nn.relu(_conv2d(x, params["conv_in"], stride=2))
    y = jax.nn.relu(_conv2d(x, params["res1"]))
    x = jax.nn.relu(x + _conv2d(y, params["res2"]))
    x = _pool(x, 2).reshape(x.shape[0], -1)
    parts = [jax.nn.relu(_apply(params["map"], x))]
    for name in VECTOR_GROUPS:
        flat = obs[name].reshape(obs[name].shape[0], -1)
        parts.append(jax.nn.relu(_apply(params["embed"][name], flat)))
    h = jax.nn.relu(_apply(params["rep1"], jnp.concatenate(parts, -1)))
    return _scale(_apply(params["rep2"], h))


def dynamics(params: dict, latent, action):
    """Next latent and reward logits after ``action`` (int array)."""
    x = jnp.concatenate([latent, jax.nn.one_hot(action, 3)], -1)
    nxt = _scale(_apply(params["dyn2"], jax.nn.relu(_apply(params["dyn1"], x))))
    reward = _apply(params["reward2"], jax.nn.relu(_apply(params["reward1"], x)))
    return nxt, reward


def predict(params: dict, latent):
    """Policy logits and value logits of a latent state."""
    policy = _apply(params["policy2"], jax.nn.relu(_apply(params["policy1"], latent)))
    value = _apply(params["value2"], jax.nn.relu(_apply(params["value1"], latent)))
    return policy, value


def h_transform(x):
    """MuZero's invertible value squashing ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + 0.001 x``."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1) - 1) + 1e-3 * x


def h_inverse(y):
    """The inverse of :func:`h_transform`."""
    return jnp.sign(y) * (((jnp.sqrt(1 + 4e-3 * (jnp.abs(y) + 1 + 1e-3)) - 1) / 2e-3) ** 2 - 1)


def to_scalar(logits):
    """Expected scalar of categorical logits over the transformed support."""
    support = jnp.arange(-SUPPORT, SUPPORT + 1, dtype=jnp.float32)
    return h_inverse((jax.nn.softmax(logits) * support).sum(-1))


def two_hot(x):
    """The two-hot target of scalars ``x`` over the transformed support."""
    y = jnp.clip(h_transform(x), -SUPPORT, SUPPORT) + SUPPORT
    lo = jnp.floor(y)
    frac = y - lo
    lo = lo.astype(jnp.int32)
    hi = jnp.minimum(lo + 1, BINS - 1)
    return jax.nn.one_hot(lo, BINS) * (1 - frac)[..., None] + jax.nn.one_hot(hi, BINS) * frac[..., None]


def loss(params: dict, batch: dict):
    """MuZero loss over a K-step unroll: policy, value and reward cross-entropies, plus the reward
    cross-entropy of each root action whose reward ``batch["siblings"]`` knows (not NaN)."""
    latent = represent(params, batch["obs"])
    siblings = batch["siblings"]
    known = ~jnp.isnan(siblings)
    total = 0.0
    for a in range(3):
        _, reward = dynamics(params, latent, jnp.full(latent.shape[0], a))
        target = two_hot(jnp.where(known[:, a], siblings[:, a], 0.0))
        total += (known[:, a] * -(target * jax.nn.log_softmax(reward)).sum(-1)).mean()
    steps = batch["actions"].shape[1]
    for k in range(steps + 1):
        policy, value = predict(params, latent)
        mask = batch["mask"][:, k]
        total += (mask * -(batch["policy"][:, k] * jax.nn.log_softmax(policy)).sum(-1)).mean()
        total += (mask * -(two_hot(batch["value"][:, k]) * jax.nn.log_softmax(value)).sum(-1)).mean()
        if k < steps:
            latent, reward = dynamics(params, latent, batch["actions"][:, k])
            total += (batch["mask"][:, k] * -(two_hot(batch["reward"][:, k])
                                               * jax.nn.log_softmax(reward)).sum(-1)).mean()
            latent = 0.5 * latent + 0.5 * jax.lax.stop_gradient(latent)
    return total


def adam_init(params):
    """Adam moments for ``params``."""
    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"m": zeros, "v": zeros, "t": jnp.zeros((), jnp.int32)}


@jax.jit
def train_step(params, opt, batch, lr):
    """One Adam step on the MuZero loss; returns (params, opt, loss)."""
    value, grads = jax.value_and_grad(loss)(params, batch)
    t = opt["t"] + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    scale = lr * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {"m": m, "v": v, "t": t}, value
