"""Reinforcement learning with recurrent tensors: environments and return estimators.

>>> import tempo as tpo, tempo.rl
>>> with tpo.Context() as ctx:
...     (b, B), (t, T) = ctx.dims("b", "t")
...     env = tempo.rl.make("CartPole-v1", dims=(b, t))
...     o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, t))
...     o[b, 0] = env.reset()
...     o[b, t + 1], r, d = env.step((o.spatial[2] > 0).cast("int64"))
...     g = tempo.rl.discounted_returns(r, 0.99)
...     returns, = ctx.run(bounds={B: 2, T: 5}, fetch=[g])
>>> returns.shape
(2, 5)
"""
from tempo.rl import training
from tempo.rl.env import Env, make
from tempo.rl import rollout, run_log
from tempo.rl.evaluate import evaluate
from tempo.rl.losses import PPOLoss, masked_mean, ppo_clip_loss, ppo_minibatch_loss
from tempo.rl.normalize import NormalizeObservation, NormalizeReward
from tempo.rl.resume import checkpoint_rollouts, resume_rollouts, rollout_start
from tempo.rl.returns import alive, discounted_returns, gae, n_step_returns, rollout_gae
from tempo.rl.rollout import Transition, episode_statistics

__all__ = ["Env", "NormalizeObservation", "NormalizeReward", "PPOLoss", "Transition", "alive",
           "checkpoint_rollouts", "discounted_returns", "episode_statistics", "evaluate", "gae", "make",
           "masked_mean", "n_step_returns", "ppo_clip_loss", "ppo_minibatch_loss", "resume_rollouts", "rollout",
           "rollout_gae", "rollout_start", "run_log", "training"]
