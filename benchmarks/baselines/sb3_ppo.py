"""Stable-Baselines3's PPO with CleanRL's hyper-parameters: the third system of ``benchmarks/rl_learning.py``.

SB3 (the ``bench`` extra) trains the same actor and critic as
``examples/ppo.py`` and ``benchmarks/baselines/cleanrl_rollout_ppo.py``
(separate 64-64 tanh MLPs, orthogonal init with gains sqrt(2), 0.01 for the
policy's last layer and 1 for the value's, Adam with eps 1e-5) on the same
gymnasium environments and wrappers (``cleanrl_rollout_ppo.make_env``),
with the flags mapped onto SB3's arguments:

- ``num_envs`` -> ``n_envs`` (a ``DummyVecEnv``), ``num_steps`` -> ``n_steps``,
  ``update_epochs`` -> ``n_epochs``, and the minibatch size
  ``num_envs * num_steps // num_minibatches`` -> ``batch_size``;
- ``total_timesteps`` -> whole rollouts only, as CleanRL counts them
  (``total_timesteps // (num_envs * num_steps)`` of them);
- ``learning_rate`` with ``--anneal-lr`` -> ``progress_remaining * lr``
  (SB3 updates it once per rollout, as CleanRL does);
- ``vf_coef`` -> ``vf_coef / 2``: CleanRL's value loss is ``0.5 * (v - R)^2``,
  SB3's the plain squared error;
- ``--clip-vloss`` is CleanRL's ``max(unclipped, clipped)`` loss, which SB3
  does not have (its ``clip_range_vf`` keeps only the clipped term), so SB3
  runs without value clipping.

SB3 clips Box actions to the space's bounds itself and needs those bounds
finite, so its environments leave out ``ClipAction`` (whose space is
unbounded). SB3 bootstraps truncated episodes from their final observation,
as the other two systems do. Episode returns are the raw rewards' (gymnasium's
``RecordEpisodeStatistics``, innermost). One torch thread.

    .venv/bin/python benchmarks/baselines/sb3_ppo.py --env-id CartPole-v1 --total-timesteps 500000
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cleanrl_rollout_ppo import make_env, parse  # noqa: E402  (the same flags and environment wrappers)


def main(args) -> dict:
    """Train; returns every finished episode (global step, return, length, wall s, CPU s) and the timings."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    started, cpu_started = time.perf_counter(), time.process_time()
    episodes: list[tuple[int, float, int, float, float]] = []

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    episodes.append((self.num_timesteps, float(info["episode"]["r"]), int(info["episode"]["l"]),
                                     time.perf_counter() - started, time.process_time() - cpu_started))
            return True

    envs = DummyVecEnv([make_env(args.env_id, args.gamma, clip_action=False) for _ in range(args.num_envs)])
    lr = args.learning_rate
    model = PPO("MlpPolicy", envs, learning_rate=(lambda progress: progress * lr) if args.anneal_lr else lr,
                n_steps=args.num_steps, batch_size=args.num_envs * args.num_steps // args.num_minibatches,
                n_epochs=args.update_epochs, gamma=args.gamma, gae_lambda=args.gae_lambda, clip_range=args.clip_coef,
                clip_range_vf=None, normalize_advantage=args.norm_adv, ent_coef=args.ent_coef,
                vf_coef=args.vf_coef / 2, max_grad_norm=args.max_grad_norm, seed=args.seed, device="cpu",
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh))
    batch = args.num_envs * args.num_steps  # whole rollouts, as many as CleanRL's `total_timesteps // batch`
    model.learn(total_timesteps=args.total_timesteps // batch * batch, callback=Episodes())
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    envs.close()
    global_step = int(model.num_timesteps)
    final = float(np.mean([e[1] for e in episodes[-20:]])) if episodes else float("nan")
    print(f"episodic_return={final:.2f} global_step={global_step} sps={global_step / seconds:.0f}")
    return {"episodic_return": final, "global_step": global_step, "sps": global_step / seconds,
            "seconds": seconds, "cpu_seconds": cpu, "episodes": [list(e) for e in episodes]}


if __name__ == "__main__":
    summary = main(parse())
    print("EPISODES " + json.dumps({k: summary[k] for k in ("episodes", "global_step", "sps", "seconds",
                                                           "cpu_seconds")}))
