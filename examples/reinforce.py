"""REINFORCE on CartPole-v1, written with recurrent tensors (TimeRL Alg. 1).

One program holds the whole training run: dims ``b`` (episodes of a batch),
``i`` (iterations) and ``t`` (timesteps). Returns are ``r[b, i, t:T]`` --
Monte-Carlo -- or, with ``--nstep N``, ``r[b, i, t:min(t + N, T)]``: a
one-line switch. Episodes end inside an iteration by masking (see
``docs/rl.md``): after the end, rewards are 0, so the returns and the loss
ignore those steps. With ``--until`` the loop over ``t`` ends at run time
(``tpo.end_when``) once every episode of the batch has ended; with ``--batch 1``
too, each iteration is one episode, ``T[i]`` is its length, and the program
computes exactly the environment's steps (REINFORCE updating after every
episode, its baseline the episode's mean return: ``--baseline episode``).
With or without ``--until`` the training is the same, bit for bit: every sum
over the steps adds them in step order, so the masked steps past an
episode's end change nothing (``tempo/transforms/step_order.py``; on torch
and JAX the padded program does so where ``TEMPO_STEP_ORDER=exact`` asks).

    tempo run examples/reinforce.py                 # Monte-Carlo returns
    tempo run examples/reinforce.py --nstep 8       # 8-step returns
    tempo run examples/reinforce.py --nstep 8 --tiles 10   # 8-step, learning in tiles while acting
    tempo run examples/reinforce.py --until --batch 1 --baseline episode --lr 0.005 --lr-decay 1 --iterations 600
    tempo run examples/reinforce.py --checkpoint run.safetensors --iterations 50
    tempo run examples/reinforce.py --resume run.safetensors --iterations 50

A resumed run continues the weights, Adam's moments and step count, and the
lr schedule, and ``Context(start=...)`` makes it sample the actions and
environment episodes the uninterrupted run would have: resuming is bit-identical
to never stopping.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import tempo as tpo
from tempo.transforms import tile


@dataclass
class Args:
    env: str = "CartPole-v1"
    """gymnasium environment id"""
    impl: str = "gymnasium"
    """'gymnasium' (UDF ops) or 'tensor' (CartPole written as tensor ops)"""
    seed: int = 0
    """seeds the policy initialisation, the action sampling and the environments"""
    iterations: int = 100
    """training iterations (one batch of episodes each)"""
    batch: int = 32
    """episodes per iteration"""
    steps: int = 500
    """timesteps per episode (CartPole-v1 truncates at 500)"""
    gamma: float = 0.99
    """discount factor"""
    nstep: int = 0
    """0: Monte-Carlo returns r[t:T]; N > 0: N-step returns r[t:min(t + N, T)]"""
    lr: float = 0.01
    """Adam learning rate"""
    lr_decay: float = 0.995
    """learning rate multiplier per iteration: lr * lr_decay ** i"""
    hidden: int = 32
    """width of the hidden layers"""
    layers: int = 2
    """hidden layers of the policy"""
    obs_shape: str = ""
    """observation shape ('3,4,4') for environments that take one (tempo/Synthetic-v0, episodes of `steps`)"""
    checkpoint: str = ""
    """write the policy and Adam state to this safetensors file (atomically) every `checkpoint_every` iterations"""
    checkpoint_every: int = 10
    """iterations between checkpoints"""
    resume: str = ""
    """start from a checkpoint written with --checkpoint: its weights, Adam state and lr schedule position"""
    backend: str = ""
    """backend: numpy, torch or jax (torch:cuda, jax:gpu for a GPU); empty: $TEMPO_BACKEND, else numpy"""
    device_budget: str = ""
    """hold the device tier to this many bytes ('512MB'): the learner runs in tiles and acting's output
    swaps to the host (docs/memory.md); empty: no budget"""
    until: bool = False
    """end each iteration's episodes at run time (tpo.end_when): T[i] is the step after the batch's
    longest episode ends, capped by `steps`, instead of running every iteration to `steps`"""
    baseline: str = "step"
    """'step': advantages are the returns standardized by the batch's mean and spread at each step;
    'episode': by the mean and spread over all of the batch's steps up to each episode's end (what
    one episode per iteration, --batch 1, calls for: a batch of one has no spread at a step)"""
    tiles: int = 0
    """run the learner in tiles of this many timesteps (gradients accumulated); with n-step returns the
    tiles run while acting goes on and free the observations they learned from (docs/memory.md); 0: whole"""


    def __post_init__(self) -> None:
        tpo.rl.training.require_positive(self, "iterations", "batch", "steps", "hidden", "layers", "checkpoint_every")
        if self.baseline not in ("step", "episode"):
            raise tpo.TempoError(f"--baseline is 'step' or 'episode', got {self.baseline!r}")
        if self.baseline == "step" and self.batch == 1:
            raise tpo.TempoError("--baseline step standardizes each step's returns over the batch, which a batch "
                                 "of one episode leaves at 0: use --baseline episode with --batch 1")

def main(args: Args) -> dict:
    resumed = tpo.load_checkpoint(args.resume) if args.resume else None
    done = int(resumed.tensors["iterations"]) if resumed else 0  # iterations trained before this run
    with tpo.Context(seed=args.seed, start={"i": done}) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")

        # ----- acting: the environment and the policy -----
        shape = tuple(int(n) for n in args.obs_shape.split(",") if n)
        shaped = {"obs_shape": shape, "episode_length": args.steps} if shape else {}
        env = tpo.rl.make(args.env, dims=(b, i, t), impl=args.impl, **shaped)
        policy = tpo.nn.MLP(env.obs_size, [args.hidden] * args.layers, env.num_actions, dims=(i,),
                            last_init_scale=0.01)
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        x = o.reshape(env.obs_size) if len(env.obs_shape) > 1 else o  # the networks read flat observations
        dist = tpo.nn.Categorical(logits=policy(x))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        if args.until:
            tpo.end_when(d[0:B, i, t])                               # T[i]: every episode has ended

        # ----- learning: returns, the REINFORCE loss and Adam -----
        end = T if args.nstep == 0 else tpo.min(t + args.nstep, T)
        g = r[b, i, t:end].discounted_sum(args.gamma)
        alive = tpo.rl.alive(d)                                      # 1 until the episode has ended
        if args.baseline == "step":
            baseline = g[0:B, i, t].mean()                           # mean return over the batch, per step
            spread = ((g[0:B, i, t] - baseline) ** 2.0).mean().sqrt() + 1e-6
        else:
            lived = alive[0:B, i, 0:T].sum()                          # the batch's steps up to each end
            baseline = (g * alive)[0:B, i, 0:T].sum() / lived
            spread = ((((g - baseline) ** 2.0) * alive)[0:B, i, 0:T].sum() / lived).sqrt() + 1e-6
        advantage = (g - baseline) / spread
        terms = (dist.log_prob(a) * advantage * alive)[0:B, i, 0:T]
        # Monte-Carlo returns wait for the episode's end anyway; n-step learning averages over the
        # batch's steps, a count known before the episode ends, so it can learn while acting goes on
        loss = -(terms.sum() / alive[0:B, i, 0:T].sum() if args.nstep == 0 else terms.mean())
        loss.backward()
        decay = args.lr_decay ** tpo.eval_symbol(i + done).cast("float32")
        adam = tpo.optim.Adam(policy.parameters(), lr=args.lr * decay)
        adam.step()
        if resumed:
            adam.resume(resumed)
        if args.checkpoint:
            state = {**adam.state_dict(), "iterations": tpo.eval_symbol(i + done + 1)}
            tpo.checkpoint(state, args.checkpoint, when=(i + 1) % args.checkpoint_every == 0)

        # ----- reporting: the mean episode return of every iteration -----
        report = tpo.rl.training.ReturnReport(r[0:B, i, 0:T].sum(axis=1).mean(), args.iterations,
                                              f"REINFORCE {args.env}", args.batch, args.steps)
        steps = {"env_steps": [], "computed_steps": [], "wall": [], "cpu": []}  # per iteration
        seen = alive[0:B, i, 0:T]                                    # the learner's rows: B * T[i]
        tpo.sink(tpo.cat([seen.sum().reshape(1), (seen >= 0.0).cast("float32").sum().reshape(1)]),
                 lambda counts, point: _count(steps, counts))
        report.start()
        ctx.run(bounds={B: args.batch, I: args.iterations, T: args.steps}, backend=args.backend or None,
                memory={"device_budget": args.device_budget} if args.device_budget else None,
                passes={"tile": tile.Config(tiles={"t": args.tiles})} if args.tiles else None)
    return {**report.finish(), **steps}


def _count(steps: dict, counts) -> None:
    """Keep an iteration's environment steps, its computed steps and when it ended."""
    steps["env_steps"].append(int(counts[0]))
    steps["computed_steps"].append(int(counts[1]))
    steps["wall"].append(time.perf_counter())
    steps["cpu"].append(time.process_time())


if __name__ == "__main__":
    main(tpo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
