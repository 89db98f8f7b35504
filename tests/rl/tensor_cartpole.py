"""Acting in the tensor CartPole with episodes ended at run time, shared by the tests of programs that
learn from it (device-loop frees, ended device loops, the host loop over iterations on JAX)."""
from __future__ import annotations

import tempo as tpo


def acting(ctx: tpo.Context, hidden: int, **mlp):
    """Acting in ``ctx``: dims ``b, i, t``, the tensor CartPole's episodes ended per iteration where
    every one of the batch's has ended (``tpo.end_when``), a one-hidden-layer policy (``mlp``: more
    of :class:`tpo.nn.MLP`'s arguments). The dims ``((b, B), (i, I), (t, T))``, the policy, its action
    distribution, the actions, rewards and done flags."""
    (b, B), (i, I), (t, T) = dims = ctx.dims("b", "i", "t")
    env = tpo.rl.make("CartPole-v1", dims=(b, i, t), impl="tensor")
    policy = tpo.nn.MLP(env.obs_size, [hidden], env.num_actions, dims=(i,), **mlp)
    o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
    o[b, i, 0] = env.reset()
    dist = tpo.nn.Categorical(logits=policy(o))
    a = dist.sample()
    o[b, i, t + 1], r, d = env.step(a)
    tpo.end_when(d[0:B, i, t])
    return dims, policy, dist, a, r, d
