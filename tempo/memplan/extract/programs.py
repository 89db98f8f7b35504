"""Real JAX programs whose compiled buffers become game instances.

Each builder takes a ``scale`` (depth) and returns ``(function, example
arguments)``; the function is one full training step (forward, backward and
the optimiser update), so its buffers are those of a real trainer.
"""
from __future__ import annotations


def _sgd(loss):
    import jax

    def step(params, *batch):
        grads = jax.grad(loss)(params, *batch)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
    return step


def mlp(scale: int):
    """An MLP trainer: ``2 + 2 * scale`` layers of width 512, batch 128, SGD."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), 2 + 2 * scale)
    params = [(jax.random.normal(k, (512, 512)) * 0.02, jnp.zeros(512)) for k in keys]

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.gelu(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)
    return _sgd(loss), (params, jnp.ones((128, 512)), jnp.ones((128, 512)))


def transformer(scale: int):
    """A pre-norm transformer trainer: ``scale`` blocks, d=256, 4 heads, seq 128, batch 8."""
    import jax
    import jax.numpy as jnp

    d, heads, seq, batch = 256, 4, 128, 8

    def block_params(key):
        k = jax.random.split(key, 4)
        return {"qkv": jax.random.normal(k[0], (d, 3 * d)) * 0.02,
                "out": jax.random.normal(k[1], (d, d)) * 0.02,
                "up": jax.random.normal(k[2], (d, 4 * d)) * 0.02,
                "down": jax.random.normal(k[3], (4 * d, d)) * 0.02,
                "g1": jnp.ones(d), "g2": jnp.ones(d)}

    def norm(x, g):
        return g * x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)

    def block(p, x):
        q, k, v = jnp.split(norm(x, p["g1"]) @ p["qkv"], 3, -1)
        split = lambda t: t.reshape(batch, seq, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / (d // heads) ** 0.5
                             + jnp.triu(jnp.full((seq, seq), -1e9), 1), -1)
        x = x + (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, d) @ p["out"]
        return x + jax.nn.gelu(norm(x, p["g2"]) @ p["up"]) @ p["down"]

    def loss(params, x, y):
        for p in params:
            x = block(p, x)
        return jnp.mean((x - y) ** 2)

    params = [block_params(k) for k in jax.random.split(jax.random.PRNGKey(0), scale)]
    x = jnp.ones((batch, seq, d))
    return _sgd(loss), (params, x, x)


def convnet(scale: int):
    """A convolutional classifier trainer: ``scale`` stages of two 3x3 convs, 32x32 images."""
    import jax
    import jax.numpy as jnp

    channels = [16 * 2 ** min(s, 3) for s in range(scale)]
    keys = jax.random.split(jax.random.PRNGKey(0), 2 * scale + 1)
    params, cin = [], 3
    for s, c in enumerate(channels):
        params.append((jax.random.normal(keys[2 * s], (c, cin, 3, 3)) * 0.1,
                       jax.random.normal(keys[2 * s + 1], (c, c, 3, 3)) * 0.1))
        cin = c
    head = jax.random.normal(keys[-1], (cin, 10)) * 0.1

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")

    def loss(all_params, x, y):
        convs, head = all_params
        for s, (w1, w2) in enumerate(convs):
            x = jax.nn.relu(conv(jax.nn.relu(conv(x, w1)), w2))
            if s < 3:
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        logits = x.mean((2, 3)) @ head
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))

    return _sgd(loss), ((params, head), jnp.ones((16, 3, 32, 32)), jnp.ones((16, 10)) / 10)


PROGRAMS = {"mlp": mlp, "transformer": transformer, "convnet": convnet}
