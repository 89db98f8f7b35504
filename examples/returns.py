"""Discounted returns and a sliding-window mean of a reward stream, with Tempo.

Run it with ``tempo run examples/returns.py [--gamma 0.9 --steps 20 ...]``.
Tempo computes, for every timestep t of a random reward stream r,

    return       g[t] = sum_{k=t}^{T-1} gamma^(k-t) * r[k]     (reads the future)
    window mean  w[t] = mean(r[max(0, t-window+1) : t+1])      (reads the past)

and the script checks both against a plain NumPy loop.
"""
from dataclasses import dataclass

import numpy as np

import tempo as tpo
from tempo.rl.training import parse_args


@dataclass
class Args:
    gamma: float = 0.99
    """discount factor of the returns"""
    window: int = 4
    """number of timesteps in the sliding-window mean"""
    steps: int = 10
    """length T of the reward stream"""
    seed: int = 0
    """seed of the random reward stream"""
    backend: str = ""
    """backend: numpy, torch or jax (torch:cuda, jax:gpu for a GPU); empty: $TEMPO_BACKEND, else numpy"""


if __name__ == "__main__":
    args = parse_args(Args, __doc__.splitlines()[0])
    rng = np.random.default_rng(args.seed)
    rewards = rng.uniform(-1.0, 1.0, size=args.steps).astype(np.float32)

    # The Tempo program: recurrent tensors over the timestep dimension t.
    ctx = tpo.Context()
    with ctx:
        (t, T), = ctx.dims("t")
        r = tpo.from_numpy(rewards, dims=(t,))                      # r[t] = rewards[t]
        g = r[t:T].discounted_sum(args.gamma)                        # future rewards, discounted
        w = r[tpo.max(0, t - args.window + 1):t + 1].mean()          # past `window` rewards
        out = ctx.run(bounds={T: args.steps}, fetch=[g, w], backend=args.backend or None)
    returns, window_means = (np.asarray(x) for x in out)

    # The same two quantities with a plain NumPy loop.
    ref_returns = np.zeros(args.steps)
    running = 0.0
    for k in reversed(range(args.steps)):
        running = float(rewards[k]) + args.gamma * running
        ref_returns[k] = running
    ref_window_means = np.array(
        [rewards[max(0, k - args.window + 1):k + 1].mean() for k in range(args.steps)])

    print(f"{'t':>3}  {'reward':>8}  {'return':>8}  {'window mean':>11}")
    for k in range(args.steps):
        print(f"{k:>3}  {rewards[k]:>8.3f}  {returns[k]:>8.3f}  {window_means[k]:>11.3f}")

    assert returns.shape == (args.steps,), returns.shape
    assert window_means.shape == (args.steps,), window_means.shape
    assert np.allclose(returns, ref_returns, rtol=1e-5, atol=1e-5), (returns, ref_returns)
    assert np.allclose(window_means, ref_window_means, rtol=1e-5, atol=1e-5)
    print("ok: returns and window means match the NumPy loop")
