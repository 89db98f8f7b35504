"""PPO for continuous actions as CleanRL's ``ppo_continuous_action.py`` runs it.

Same flags and defaults as CleanRL (HalfCheetah, one environment, rollouts
of 2048 steps, 10 epochs of 32 minibatches). The policy is a diagonal
Gaussian: an MLP gives the mean and a state-independent learned log std
(``tpo.nn.DiagGaussianHead``) the spread; actions are clipped to the Box
bounds when stepping. As in CleanRL's wrappers, the policy sees observations
normalised by running per-environment statistics (which, as gymnasium's
wrapper inside each autoresetting environment, also merge the observation an
episode ends on, the one a truncation bootstraps from) and learns from rewards
scaled by the running std of the discounted return (both recurrences, clipped
to [-10, 10]); episodic returns are reported on the raw rewards. One
difference from CleanRL's file, shared with the baseline of
``benchmarks/rl_learning.py``: a truncated episode bootstraps from the value
of its final observation (``--no-bootstrap-truncation`` treats truncation as
termination, as CleanRL does).

The program has the shape of ``examples/ppo.py``: update ``i`` trains on the
rollout taken at update ``k = (i // K) * K``, ``K = update_epochs *
num_minibatches``, and the environments, statistics and observations carry
from one rollout to the next.

    tempo run examples/ppo_continuous.py --env-id Pendulum-v1 --total-timesteps 100000
    tempo run examples/ppo_continuous.py --env-id HalfCheetah-v5
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import tempo as tpo
from tempo.rl.minibatch import Minibatches, flatten
from tempo.rl.run_log import LOSS_TAGS, RunLog


@dataclass
class Args:
    exp_name: str = "ppo_continuous_action"
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    save_model: bool = False
    """whether to save the policy into `runs/{run_name}`"""
    env_id: str = "HalfCheetah-v5"
    """the id of the environment"""
    impl: str = "gymnasium"
    """'gymnasium' (UDF ops) or 'tensor' (environments written as tensor ops: Pendulum-v1)"""
    vector: str = "sync"
    """gymnasium vector environment: 'sync' (one process) or 'async' (a subprocess per environment)"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""
    bootstrap_truncation: bool = True
    """bootstrap truncated episodes from their final observation's value (off: CleanRL's file, truncation ends)"""
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


@dataclass
class Program:
    """The RTs of one run's program that :func:`main` logs, checkpoints and saves (and tests read)."""
    env: tpo.rl.Env
    step: tpo.rl.Transition
    critic: tpo.nn.MLP
    actor: tpo.nn.MLP
    head: tpo.nn.DiagGaussianHead
    reward: tpo.RecurrentTensor  # normalised, what GAE reads
    final: tpo.RecurrentTensor  # each step's final observation, normalised: what a truncation bootstraps from
    table: tpo.RecurrentTensor  # a rollout's (num_envs * num_steps, features): obs, action, logp, adv, ret, value
    batches: Minibatches  # which rows of the table each update reads
    stats: tpo.rl.PPOLoss
    lr: tpo.RecurrentTensor | float
    adam: tpo.optim.Adam
    carried: list  # what crosses from one rollout to the next
    episode_return: tpo.RecurrentTensor
    episode_length: tpo.RecurrentTensor


def program(args: Args, dims, done: int, num_iterations: int, **env_kwargs) -> Program:
    """The run as one program over ``dims = (b, i, t)``: rollouts at every ``K``-th ``i``, updates between.

    ``done``: the updates an earlier run took (the context starts at
    ``i = done``); ``env_kwargs`` go to the environment (e.g.
    ``max_episode_steps``).
    """
    b, i, t = dims
    batch_size = args.num_envs * args.num_steps
    K = args.update_epochs * args.num_minibatches  # updates per rollout
    batches = Minibatches(i, batch_size, args.update_epochs, args.num_minibatches)

    # ----- the agent: critic, actor mean and a learned state-independent log std -----
    env = tpo.rl.make(args.env_id, dims=(b, i, t), impl=args.impl, autoreset=True, rollout_every=K,
                      **({"vector": args.vector} if args.impl == "gymnasium" else {}), **env_kwargs)
    if env.is_discrete:
        raise tpo.TempoError(f"{args.env_id} has discrete actions: train it with examples/ppo.py")
    n_obs, n_act = env.obs_size, env.action_size
    critic = tpo.nn.MLP(n_obs, [64, 64], 1, dims=(i,), init="orthogonal", last_init_scale=1.0)
    actor = tpo.nn.MLP(n_obs, [64, 64], n_act, dims=(i,), init="orthogonal", last_init_scale=0.01)
    head = tpo.nn.DiagGaussianHead(n_act, dims=(i,))

    # ----- the rollout, on normalised observations and rewards -----
    raw = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))  # as gymnasium's wrapper sees it
    raw[b, i, 0] = env.reset()
    norm = tpo.rl.NormalizeObservation(raw, rollout_every=K, autoreset=True)
    o = norm.normalized
    dist = head(actor(o))
    a = dist.sample()
    step = env.step(a)
    raw[b, i, t + 1] = step.obs
    final = norm.final(step.final_obs, step.done)  # what gymnasium's wrapper makes of the obs reached
    reward_norm = tpo.rl.NormalizeReward(step.reward, step.terminated, args.gamma, rollout_every=K)
    reward = reward_norm.normalized
    value = critic(o).squeeze(0).detach()
    next_value = critic(final).squeeze(0).detach()
    ends = step.terminated if args.bootstrap_truncation else step.done  # the steps that do not bootstrap
    advantages, returns = tpo.rl.rollout_gae(reward, value, next_value, ends, step.done, args.gamma,
                                             args.gae_lambda)
    episodes = tpo.rl.episode_statistics(step.reward, step.done, every=K)
    episode_return, episode_length = episodes

    # ----- learning: update i trains on minibatch i % num_minibatches of rollout k -----
    def column(x):  # one rollout's x as columns (num_envs * num_steps, size) of the minibatch table
        x = x.cast("float32")
        return flatten(x if x.shape else x.unsqueeze(0), args.num_envs, args.num_steps)

    logp = dist.log_prob(a).sum(-1).detach()
    table = tpo.cat([column(x) for x in (o, a, logp, advantages, returns, value)], axis=1)
    rows = batches.select(table)
    mb_obs, mb_act = rows.spatial[:, 0:n_obs], rows.spatial[:, n_obs:n_obs + n_act]
    mb = [rows.spatial[:, n_obs + n_act + k] for k in range(4)]
    new = head(actor(mb_obs))
    stats = tpo.rl.ppo_minibatch_loss(new.log_prob(mb_act).sum(-1), mb[0], mb[1], critic(mb_obs).squeeze(-1),
                                      mb[3], mb[2], new.entropy().sum(-1), args.clip_coef,
                                      args.clip_vloss, args.ent_coef, args.vf_coef, args.norm_adv)
    stats.loss.backward()
    frac = 1.0 - tpo.eval_symbol((i + done) // K).cast("float32") / float(num_iterations)
    lr = args.learning_rate * frac if args.anneal_lr else args.learning_rate
    adam = tpo.optim.Adam(critic.parameters() + actor.parameters() + head.parameters(), lr=lr, eps=1e-5,
                          max_grad_norm=args.max_grad_norm)
    keep = None if args.target_kl is None else batches.keep_updating(stats.approx_kl, args.target_kl)
    adam.step(when=keep)
    return Program(env, step, critic, actor, head, reward, final, table, batches, stats, lr, adam,
                   [env, episodes, norm, reward_norm], episode_return, episode_length)


def main(args: Args) -> dict:
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    K = args.update_epochs * args.num_minibatches  # updates per rollout
    resumed = tpo.load_checkpoint(args.resume) if args.resume else None
    done = tpo.rl.rollout_start(resumed, K, num_iterations * K)  # updates an earlier run took
    with tpo.Context(seed=args.seed, start={"i": done}) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        run = program(args, (b, i, t), done, num_iterations)
        adam = run.adam

        # ----- checkpoints: what each rollout starts from, written where it starts -----
        if resumed:
            tpo.rl.resume_rollouts(resumed, adam, run.carried, args.num_envs)
        if args.checkpoint:
            tpo.rl.checkpoint_rollouts(args.checkpoint, i, args.checkpoint_every * K, adam, run.carried)

        # ----- logging and the saved policy -----
        log = RunLog(args.num_envs, args.num_steps, num_iterations, K,
                     f"runs/{run_name}" if args.track_tensorboard else None, f"PPO {args.env_id}", done // K)
        log.track_episodes(run.episode_return, run.episode_length, run.step.done)
        log.track_losses(i, {name: getattr(run.stats, name) for name in LOSS_TAGS}, run.lr)
        model_path = f"runs/{run_name}/ppo_continuous_action.safetensors"
        if args.save_model:
            os.makedirs(os.path.dirname(model_path), exist_ok=True)
            weights = {f"{part}.{name}": adam.updated(p) for part, module in (("actor", run.actor),
                                                                             ("critic", run.critic))
                       for name, p in module.named_parameters()}
            weights["actor_logstd"] = adam.updated(run.head.log_std)
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
