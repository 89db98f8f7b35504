"""The JAX baselines' network and optimizer: ``tpo.nn.MLP`` and ``tpo.optim.Adam`` written with jax.numpy."""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


def mlp_init(key, sizes: list[int], last_init_scale: float = 1.0) -> list:
    """Weights and biases U(-s/sqrt(in), s/sqrt(in)), s = last_init_scale for the last layer, else 1."""
    params = []
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        key, kw, kb = jax.random.split(key, 3)
        bound = (last_init_scale if k == len(sizes) - 2 else 1.0) / math.sqrt(n_in)
        params.append((jax.random.uniform(kw, (n_in, n_out), minval=-bound, maxval=bound),
                       jax.random.uniform(kb, (n_out,), minval=-bound, maxval=bound)))
    return params


def mlp(params: list, x):
    """tanh between the layers, as tpo.nn.MLP."""
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


class AdamState(NamedTuple):
    m: list
    v: list
    count: jax.Array


def adam_init(params) -> AdamState:
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return AdamState(zeros, zeros, jnp.zeros((), jnp.float32))


def adam_step(params, grads, state: AdamState, lr, max_grad_norm: float | None = None,
              b1=0.9, b2=0.999, eps=1e-8):
    """One Adam update; with ``max_grad_norm`` the gradients' global norm is clipped first."""
    if max_grad_norm is not None:
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        scale = jnp.minimum(1.0, max_grad_norm / (norm + 1e-6))
        grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state.v, grads)
    count = state.count + 1.0
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * (m / (1 - b1 ** count)) / (jnp.sqrt(v / (1 - b2 ** count)) + eps), params, m, v)
    return params, AdamState(m, v, count)
