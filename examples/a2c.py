"""A2C on CartPole-v1: REINFORCE with a learned value baseline and n-step bootstrapped returns.

The critic ``v[b, i, t]`` is a second MLP; the targets are the n-step returns
``r[t:min(t + n, T)]`` bootstrapped from ``v[t + n]`` (``tpo.rl.n_step_returns``),
with gradients stopped through the targets. Episodes end by masking, as in
``examples/reinforce.py``.

    tempo run examples/a2c.py --iterations 60
"""
from __future__ import annotations

from dataclasses import dataclass


import tempo as tpo


@dataclass
class Args:
    env: str = "CartPole-v1"
    """gymnasium environment id"""
    seed: int = 0
    """seeds initialisation, sampling and the environments"""
    iterations: int = 100
    """training iterations"""
    batch: int = 32
    """episodes per iteration"""
    steps: int = 500
    """timesteps per episode"""
    gamma: float = 0.99
    """discount factor"""
    nstep: int = 16
    """bootstrap horizon n of the returns r[t:min(t + n, T)] + gamma**n v[t + n]"""
    lr: float = 0.005
    """Adam learning rate (actor and critic); at 0.01 training is unstable"""
    value_coef: float = 0.5
    """weight of the critic's squared error"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    hidden: int = 32
    """width of the hidden layers"""
    backend: str = ""
    """backend: numpy, torch or jax (torch:cuda, jax:gpu for a GPU); empty: $TEMPO_BACKEND, else numpy"""


    def __post_init__(self) -> None:
        tpo.rl.training.require_positive(self, "iterations", "batch", "steps", "nstep", "hidden")

def main(args: Args) -> dict:
    with tpo.Context(seed=args.seed) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")

        # ----- acting -----
        env = tpo.rl.make(args.env, dims=(b, i, t))
        actor = tpo.nn.MLP(env.obs_size, [args.hidden, args.hidden], env.num_actions, dims=(i,),
                           last_init_scale=0.01)
        critic = tpo.nn.MLP(env.obs_size, [args.hidden, args.hidden], 1, dims=(i,))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=actor(o))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)

        # ----- learning: n-step targets bootstrapped from the critic -----
        v = critic(o).squeeze(0)
        target = tpo.rl.n_step_returns(r, args.gamma, args.nstep, value=v.detach(), done=d).detach()
        alive = tpo.rl.alive(d)                                      # 1 until the episode has ended
        advantage = (target - v).detach()
        per_step = (-dist.log_prob(a) * advantage + args.value_coef * (target - v) ** 2.0
                    - args.entropy_coef * dist.entropy()) * alive
        loss = per_step[0:B, i, 0:T].sum() / alive[0:B, i, 0:T].sum()
        loss.backward()
        tpo.optim.Adam(actor.parameters() + critic.parameters(), lr=args.lr, max_grad_norm=1.0).step()

        # ----- reporting: the mean episode return of every iteration -----
        report = tpo.rl.training.ReturnReport(r[0:B, i, 0:T].sum(axis=1).mean(), args.iterations,
                                              f"A2C {args.env}", args.batch, args.steps)
        report.start()
        ctx.run(bounds={B: args.batch, I: args.iterations, T: args.steps}, backend=args.backend or None)
    return report.finish()


if __name__ == "__main__":
    main(tpo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
