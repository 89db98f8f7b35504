"""PPO on CartPole-v1: clipped surrogate, GAE, several updates per batch of episodes.

The parameters are a recurrence over the update dim ``i``. A batch of
episodes is collected at every ``epochs``-th update, with the policy of that
update, and the next ``epochs`` updates all train on it:
``k = (i // epochs) * epochs`` is the update whose episodes update ``i``
reads. Acting is defined at every ``i`` but only the points some update reads
are executed, so episodes are collected once per batch. The probability ratio
compares the current policy with the one that acted (``logp_old``, detached),
so after the first update of a batch the clip is active.

    tempo run examples/ppo_fixed_horizon.py --iterations 60 --epochs 4

Large observations under a device budget (the learner runs in tiles, the
observations live in the host tier; docs/memory.md):

    tempo run examples/ppo_fixed_horizon.py --env tempo/Synthetic-v0 --impl tensor --obs-shape 3,128,128 \
        --batch 4 --steps 1000 --epochs 1 --hidden 16 --iterations 2 --device-budget 256MB
"""
from __future__ import annotations

from dataclasses import dataclass

import tempo as tpo


@dataclass
class Args:
    env: str = "CartPole-v1"
    """gymnasium environment id"""
    impl: str = "gymnasium"
    """'gymnasium' (UDF ops) or 'tensor' (CartPole written as tensor ops)"""
    seed: int = 0
    """seeds initialisation, sampling and the environments"""
    iterations: int = 60
    """batches of episodes (each trained on for `epochs` updates)"""
    epochs: int = 4
    """updates per batch of episodes"""
    batch: int = 32
    """episodes per batch"""
    steps: int = 500
    """timesteps per episode"""
    gamma: float = 0.99
    """discount factor"""
    lam: float = 0.95
    """GAE lambda"""
    clip: float = 0.2
    """PPO clip range: the ratio is clipped to [1 - clip, 1 + clip]"""
    lr: float = 0.003
    """Adam learning rate (actor and critic), annealed linearly to 0 over the updates"""
    value_coef: float = 0.5
    """weight of the critic's squared error"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus"""
    hidden: int = 32
    """width of the hidden layers"""
    layers: int = 2
    """hidden layers of the actor and of the critic"""
    obs_shape: str = ""
    """observation shape ('3,4,4') for environments that take one (tempo/Synthetic-v0, episodes of `steps`)"""
    backend: str = ""
    """backend: numpy, torch or jax (torch:cuda, jax:gpu for a GPU); empty: $TEMPO_BACKEND, else numpy"""
    device_budget: str = ""
    """hold the device tier to this many bytes ('512MB'): the learner runs in tiles and acting's output
    swaps to the host (docs/memory.md); empty: no budget"""

    def __post_init__(self) -> None:
        tpo.rl.training.require_positive(self, "iterations", "epochs", "batch", "steps", "hidden", "layers")


def main(args: Args) -> dict:
    with tpo.Context(seed=args.seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")

        # ----- acting, with the policy of update i (executed where an update reads it) -----
        shape = tuple(int(n) for n in args.obs_shape.split(",") if n)
        shaped = {"obs_shape": shape, "episode_length": args.steps} if shape else {}
        env = tpo.rl.make(args.env, dims=(b, i, t), impl=args.impl, **shaped)
        actor = tpo.nn.MLP(env.obs_size, [args.hidden] * args.layers, env.num_actions, dims=(i,),
                           last_init_scale=0.01)
        critic = tpo.nn.MLP(env.obs_size, [args.hidden] * args.layers, 1, dims=(i,))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        x = o.reshape(env.obs_size) if len(env.obs_shape) > 1 else o  # the networks read flat observations
        dist = tpo.nn.Categorical(logits=actor(x))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        logp_old = dist.log_prob(a).detach()
        advantage, target = tpo.rl.gae(r, critic(x).squeeze(0).detach(), d, args.gamma, args.lam)
        alive = tpo.rl.alive(d)                                      # 1 until the episode has ended

        # ----- learning: update i trains on the episodes of update k -----
        k = (i // args.epochs) * args.epochs
        obs, act = x[0:B, k, 0:T], a[0:B, k, 0:T]
        new = tpo.nn.Categorical(logits=actor(obs))
        loss = tpo.rl.ppo_clip_loss(new.log_prob(act), logp_old[0:B, k, 0:T], advantage[0:B, k, 0:T],
                                    critic(obs).squeeze(-1), target[0:B, k, 0:T], new.entropy(),
                                    alive[0:B, k, 0:T], args.clip, args.value_coef, args.entropy_coef)
        loss.backward()
        lr = args.lr * (1.0 - tpo.eval_symbol(i).cast("float32") / tpo.eval_symbol(I).cast("float32"))
        tpo.optim.Adam(actor.parameters() + critic.parameters(), lr=lr, max_grad_norm=0.5).step()

        # ----- reporting: the mean episode return of every batch (at its first update) -----
        report = tpo.rl.training.ReturnReport(r[0:B, k, 0:T].sum(axis=1).mean(), args.iterations,
                                              f"PPO {args.env}", args.batch, args.steps, every=args.epochs)
        report.start()
        ctx.run(bounds={B: args.batch, I: args.iterations * args.epochs, T: args.steps},
                backend=args.backend or None,
                memory={"device_budget": args.device_budget} if args.device_budget else None)
    return report.finish()


if __name__ == "__main__":
    main(tpo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
