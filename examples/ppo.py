"""PPO as CleanRL's ``ppo.py`` runs it: persistent vector environments, GAE, minibatch epochs.

Same flags, defaults and outputs as CleanRL: a CleanRL user changes the
command name and nothing else. ``num_envs`` environments are stepped
``num_steps`` times per rollout and keep running across rollouts,
resetting themselves at the end of an episode; truncated episodes bootstrap
from the value of their final observation. Each rollout then trains for
``update_epochs`` epochs of ``num_minibatches`` shuffled minibatches.

The whole run is one program. The update dim ``i`` counts optimizer steps;
a rollout is taken at every ``update_epochs * num_minibatches``-th update
(``k = (i // K) * K`` is the update whose rollout update ``i`` trains on),
and the environments' state, the episode statistics and the observation
are recurrences carried from one rollout to the next.

    tempo run examples/ppo.py --env-id CartPole-v1 --total-timesteps 500000
    tempo run examples/ppo.py --env-id Acrobot-v1 --save-model
    tempo rl evaluate runs/<run name>/ppo.safetensors --env-id CartPole-v1

TensorBoard files go to ``runs/<env_id>__<exp_name>__<seed>__<time>``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import tempo as tpo
from tempo.rl.minibatch import Minibatches, flatten
from tempo.rl.run_log import RunLog


@dataclass
class Args:
    exp_name: str = "ppo"
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    save_model: bool = False
    """whether to save the policy into `runs/{run_name}`"""
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    impl: str = "gymnasium"
    """'gymnasium' (UDF ops) or 'tensor' (environments written as tensor ops: CartPole-v1, Acrobot-v1)"""
    vector: str = "sync"
    """gymnasium vector environment: 'sync' (one process) or 'async' (a subprocess per environment)"""
    total_timesteps: int = 500000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""
    track_tensorboard: bool = True
    """write TensorBoard event files under runs/{run_name}"""
    backend: str = ""
    """backend: numpy, torch or jax; empty: $TEMPO_BACKEND, else numpy"""
    checkpoint: str = ""
    """write what the next rollout starts from (weights, Adam state, carried statistics, the environments) to this
    safetensors file (atomically) every `checkpoint_every` rollouts"""
    checkpoint_every: int = 10
    """rollouts between checkpoints"""
    resume: str = ""
    """go on from a checkpoint written with --checkpoint (same flags), as if the run had never stopped"""

    def __post_init__(self) -> None:
        tpo.rl.training.require_positive(self, "total_timesteps", "num_envs", "num_steps", "num_minibatches",
                                         "update_epochs", "checkpoint_every")

def main(args: Args) -> dict:
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    K = args.update_epochs * args.num_minibatches  # updates per rollout
    resumed = tpo.load_checkpoint(args.resume) if args.resume else None
    done = tpo.rl.rollout_start(resumed, K, num_iterations * K)  # updates an earlier run took
    with tpo.Context(seed=args.seed, start={"i": done}) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        batches = Minibatches(i, batch_size, args.update_epochs, args.num_minibatches)

        # ----- the agent: CleanRL's separate actor and critic MLPs, orthogonal init -----
        env = tpo.rl.make(args.env_id, dims=(b, i, t), impl=args.impl, autoreset=True, rollout_every=K,
                          **({"vector": args.vector} if args.impl == "gymnasium" else {}))
        n_obs = env.obs_size
        critic = tpo.nn.MLP(n_obs, [64, 64], 1, dims=(i,), init="orthogonal", last_init_scale=1.0)
        actor = tpo.nn.MLP(n_obs, [64, 64], env.num_actions, dims=(i,), init="orthogonal", last_init_scale=0.01)

        # ----- the rollout: persistent environments, carried across rollouts -----
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset().cast("float32")
        dist = tpo.nn.Categorical(logits=actor(o))
        a = dist.sample()
        step = env.step(a)
        o[b, i, t + 1] = step.obs.cast("float32")
        value = critic(o).squeeze(0).detach()
        next_value = critic(step.final_obs.cast("float32")).squeeze(0).detach()
        advantages, returns = tpo.rl.rollout_gae(step.reward, value, next_value, step.terminated, step.done,
                                                 args.gamma, args.gae_lambda)
        episodes = tpo.rl.episode_statistics(step.reward, step.done, every=K)
        episode_return, episode_length = episodes
        carried = [env, episodes]  # what crosses from one rollout to the next

        # ----- learning: update i trains on minibatch i % num_minibatches of rollout k -----
        def column(x):  # one rollout's x as columns (num_envs * num_steps, size) of the minibatch table
            x = x.cast("float32")
            return flatten(x if x.shape else x.unsqueeze(0), args.num_envs, args.num_steps)

        table = tpo.cat([column(x) for x in (o, a, dist.log_prob(a).detach(), advantages, returns, value)], axis=1)
        rows = batches.select(table)
        mb_obs, mb = rows.spatial[:, 0:n_obs], [rows.spatial[:, n_obs + k] for k in range(5)]
        new = tpo.nn.Categorical(logits=actor(mb_obs))
        stats = tpo.rl.ppo_minibatch_loss(new.log_prob(mb[0].cast("int64")), mb[1], mb[2],
                                          critic(mb_obs).squeeze(-1), mb[4], mb[3], new.entropy(), args.clip_coef,
                                          args.clip_vloss, args.ent_coef, args.vf_coef, args.norm_adv)
        stats.loss.backward()
        frac = 1.0 - tpo.eval_symbol((i + done) // K).cast("float32") / float(num_iterations)
        lr = args.learning_rate * frac if args.anneal_lr else args.learning_rate
        adam = tpo.optim.Adam(critic.parameters() + actor.parameters(), lr=lr, eps=1e-5,
                              max_grad_norm=args.max_grad_norm)
        keep = None if args.target_kl is None else batches.keep_updating(stats.approx_kl, args.target_kl)
        adam.step(when=keep)

        # ----- checkpoints: what each rollout starts from, written where it starts -----
        if resumed:
            tpo.rl.resume_rollouts(resumed, adam, carried, args.num_envs)
        if args.checkpoint:
            tpo.rl.checkpoint_rollouts(args.checkpoint, i, args.checkpoint_every * K, adam, carried)

        # ----- logging and the saved policy -----
        log = RunLog(args.num_envs, args.num_steps, num_iterations, K,
                     f"runs/{run_name}" if args.track_tensorboard else None, f"PPO {args.env_id}", done // K)
        log.track_episodes(episode_return, episode_length, step.done)
        log.track_losses(i, {name: getattr(stats, name) for name in tpo.rl.run_log.LOSS_TAGS}, lr)
        model_path = f"runs/{run_name}/ppo.safetensors"
        if args.save_model:
            os.makedirs(os.path.dirname(model_path), exist_ok=True)
            weights = {f"{part}.{name}": adam.updated(p) for part, module in (("actor", actor), ("critic", critic))
                       for name, p in module.named_parameters()}
            tpo.checkpoint(weights, model_path, when=i == I - 1)
        log.start()
        ctx.run(bounds={B: args.num_envs, I: num_iterations * K - done, T: args.num_steps},
                backend=args.backend or None)
    summary = log.finish()
    if args.save_model:
        print(f"model saved to {model_path}")
        summary["model_path"] = model_path
    return summary


if __name__ == "__main__":
    main(tpo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
