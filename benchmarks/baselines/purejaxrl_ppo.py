"""PureJaxRL-style PPO in JAX on tempo/Synthetic-v0: the baseline of ``benchmarks/rl_train.py``.

The algorithm of ``examples/ppo_fixed_horizon.py``, written the way PureJaxRL writes PPO:
acting is a ``lax.scan`` over the timesteps with the environments as a batch
axis, GAE a reverse ``lax.scan``, and the updates a ``lax.scan`` over the
epochs; the whole iteration (acting, GAE, updates) is one ``jax.jit``-ed
function, compiled ahead of time. Same network, initialisation,
hyper-parameters, loss, Adam with ``max_grad_norm=0.5`` and linear learning
rate annealing as the Tempo program.

    .venv/bin/python benchmarks/baselines/purejaxrl_ppo.py --iterations 5 --envs 512 --steps 250
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

import synthetic_env
from args import PPOArgs as Args
from jax_nets import adam_init, adam_step, mlp, mlp_init


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array


def make_iteration(args: Args):
    """One training iteration as a pure function ``(params, adam, key, iteration) -> (..., metrics)``."""
    obs_shape = tuple(int(n) for n in args.obs_shape.split(","))
    pattern = jnp.asarray(synthetic_env.pattern(obs_shape))
    B, T, updates = args.envs, args.steps, args.iterations * args.epochs

    def observe(state):
        return synthetic_env.observe(pattern, state, args.num_actions).reshape(B, -1)

    def iteration(params, adam, key, iteration):
        # ----- acting: fresh episodes, a lax.scan over the timesteps -----
        key, reset_key, act_key = jax.random.split(key, 3)
        state = jax.random.randint(reset_key, (B,), 0, args.num_actions)

        def env_step(carry, inputs):
            state, ended = carry
            t, k = inputs
            obs = observe(state)
            logits = mlp(params["actor"], obs)
            action = jax.random.categorical(k, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
            value = mlp(params["critic"], obs)[:, 0]
            state, reward, done = synthetic_env.step(jnp, state, ended, action, t, args.num_actions, T)
            return (state, done), Transition(obs, action, logp, value, reward, done)

        inputs = (jnp.arange(T), jax.random.split(act_key, T))
        _, batch = jax.lax.scan(env_step, (state, jnp.zeros(B, bool)), inputs)

        # ----- GAE: a reverse lax.scan (no bootstrap after the last step; nothing after an episode's end) -----
        live = 1.0 - batch.done.astype(jnp.float32)
        alive = jnp.concatenate([jnp.ones((1, B)), live[:-1]])
        next_values = jnp.concatenate([batch.value[1:], jnp.zeros((1, B))])
        delta = (batch.reward + args.gamma * live * next_values - batch.value) * alive

        def gae_step(last, x):
            delta, live = x
            last = delta + args.gamma * args.lam * live * last
            return last, last

        _, advantages = jax.lax.scan(gae_step, jnp.zeros(B), (delta, live), reverse=True)
        targets = advantages + batch.value * alive

        # ----- learning: full-batch updates, a lax.scan over the epochs -----
        def loss_fn(params):
            logits = mlp(params["actor"], batch.obs)
            logps = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(logps, batch.action[..., None], axis=-1)[..., 0]
            entropy = -(jnp.exp(logps) * logps).sum(-1)
            value = mlp(params["critic"], batch.obs)[..., 0]
            mean = (advantages * alive).sum() / alive.sum()
            spread = jnp.sqrt(((advantages - mean) ** 2 * alive).sum() / alive.sum()) + 1e-8
            adv = (advantages - mean) / spread
            ratio = jnp.exp(logp - batch.logp)
            clipped = jnp.clip(ratio, 1.0 - args.clip, 1.0 + args.clip)
            surrogate = jnp.maximum(-adv * ratio, -adv * clipped)
            per_step = surrogate + args.value_coef * (value - targets) ** 2 - args.entropy_coef * entropy
            return (per_step * alive).sum() / alive.sum()

        def update(carry, epoch):
            params, adam = carry
            loss, grads = jax.value_and_grad(loss_fn)(params)
            lr = args.lr * (1.0 - (iteration * args.epochs + epoch) / updates)
            params, adam = adam_step(params, grads, adam, lr, args.max_grad_norm)
            return (params, adam), loss

        (params, adam), loss = jax.lax.scan(update, (params, adam), jnp.arange(args.epochs))
        return params, adam, key, batch.reward.sum(0).mean(), loss[-1]

    return iteration


def initial_state(args: Args):
    """The parameters, Adam's state and the random key a run starts from."""
    obs_size = math.prod(int(n) for n in args.obs_shape.split(","))
    key, actor_key, critic_key = jax.random.split(jax.random.PRNGKey(args.seed), 3)
    params = {"actor": mlp_init(actor_key, [obs_size, *[args.hidden] * args.layers, args.num_actions], 0.01),
              "critic": mlp_init(critic_key, [obs_size, *[args.hidden] * args.layers, 1])}
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
