"""PureJaxRL-style REINFORCE in JAX on tempo/Synthetic-v0: the baseline of ``benchmarks/rl_train.py``.

The algorithm of ``examples/reinforce.py`` (Monte-Carlo returns), written in
the style of PureJaxRL: acting is a ``lax.scan`` over the timesteps with the
environments as a batch axis, the discounted returns a reverse ``lax.scan``,
and the whole iteration (acting, returns, the update) is one ``jax.jit``-ed
function, compiled ahead of time. Same network, initialisation,
hyper-parameters, loss (returns standardised per timestep over the batch,
masked after each episode's end) and Adam with a decaying learning rate as
the Tempo program.

    .venv/bin/python benchmarks/baselines/purejaxrl_reinforce.py --iterations 5 --envs 512 --steps 250
"""
from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp

import synthetic_env
from args import ReinforceArgs as Args
from jax_nets import adam_init, adam_step, mlp, mlp_init


def make_iteration(args: Args):
    """One training iteration as a pure function ``(params, adam, key, iteration) -> (..., metrics)``."""
    obs_shape = tuple(int(n) for n in args.obs_shape.split(","))
    pattern = jnp.asarray(synthetic_env.pattern(obs_shape))
    B, T = args.envs, args.steps

    def iteration(params, adam, key, iteration):
        # ----- acting: fresh episodes, a lax.scan over the timesteps -----
        key, reset_key, act_key = jax.random.split(key, 3)
        state = jax.random.randint(reset_key, (B,), 0, args.num_actions)

        def env_step(carry, inputs):
            state, ended = carry
            t, k = inputs
            obs = synthetic_env.observe(pattern, state, args.num_actions).reshape(B, -1)
            action = jax.random.categorical(k, mlp(params, obs))
            state, reward, done = synthetic_env.step(jnp, state, ended, action, t, args.num_actions, T)
            return (state, done), (obs, action, reward, done)

        inputs = (jnp.arange(T), jax.random.split(act_key, T))
        _, (obs, actions, rewards, dones) = jax.lax.scan(env_step, (state, jnp.zeros(B, bool)), inputs)

        # ----- Monte-Carlo returns (a reverse lax.scan), standardised per timestep over the batch -----
        def return_step(last, reward):
            last = reward + args.gamma * last
            return last, last

        _, discounted = jax.lax.scan(return_step, jnp.zeros(B), rewards, reverse=True)
        alive = jnp.concatenate([jnp.ones((1, B)), 1.0 - dones[:-1].astype(jnp.float32)])
        baseline = discounted.mean(1, keepdims=True)
        spread = jnp.sqrt(((discounted - baseline) ** 2).mean(1, keepdims=True)) + 1e-6
        advantages = (discounted - baseline) / spread

        # ----- learning: one update replaying the forward pass -----
        def loss_fn(params):
            logps = jax.nn.log_softmax(mlp(params, obs))
            logp = jnp.take_along_axis(logps, actions[..., None], axis=-1)[..., 0]
            return -(logp * advantages * alive).sum() / alive.sum()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        params, adam = adam_step(params, grads, adam, args.lr * args.lr_decay ** iteration)
        return params, adam, key, rewards.sum(0).mean(), loss

    return iteration


def initial_state(args: Args):
    """The parameters, Adam's state and the random key a run starts from."""
    obs_size = math.prod(int(n) for n in args.obs_shape.split(","))
    key, policy_key = jax.random.split(jax.random.PRNGKey(args.seed))
    params = mlp_init(policy_key, [obs_size, *[args.hidden] * args.layers, args.num_actions], 0.01)
    return params, adam_init(params), key


def main(args: Args) -> dict:
    """Train; returns the mean episode return and the loss of every batch, and the timings."""
    # ----- setup: parameters, Adam state, and the iteration compiled ahead of time -----
    params, adam, key = initial_state(args)
    started = time.perf_counter()
    iteration = jax.jit(make_iteration(args)).lower(params, adam, key, jnp.int32(0)).compile()
    compile_s = time.perf_counter() - started

    # ----- training: one jitted call per iteration -----
    returns, losses, ends = [], [], []  # ends: when each iteration finished
    start = time.perf_counter()
    for k in range(args.iterations):
        params, adam, key, mean_return, loss = iteration(params, adam, key, jnp.int32(k))
        returns.append(float(mean_return))
        losses.append(float(loss))
        ends.append(time.perf_counter())
    return {"returns": returns, "losses": losses, "compile_s": compile_s, "start": start, "ends": ends}


if __name__ == "__main__":
    import tempo.rl.training

    out = main(tempo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
    seconds = out["ends"][-1] - out["start"]
    print(f"mean_return={out['returns'][-1]:.1f} loss={out['losses'][-1]:.4f} seconds={seconds:.2f}")
